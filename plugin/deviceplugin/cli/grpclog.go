package cli

import (
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"google.golang.org/grpc/grpclog"
)

// grpcLogger routes gRPC's own messages into the plugin's structured log, so they carry the
// node and stage like every other line. gRPC's info chatter is dropped (level Debug).
//
// gRPC's logger may only be set before gRPC runs, so it is installed once at init and Main
// only swaps the slog destination behind it.
type grpcLogger struct{}

var grpcLogDest atomic.Pointer[slog.Logger]

func init() { grpclog.SetLoggerV2(grpcLogger{}) }

// routeGRPCLogs makes log the destination of gRPC's messages for the whole process.
func routeGRPCLogs(log *slog.Logger) { grpcLogDest.Store(log.With("component", "grpc")) }

func (grpcLogger) dest() *slog.Logger {
	if l := grpcLogDest.Load(); l != nil {
		return l
	}
	return slog.Default()
}

func (g grpcLogger) Info(args ...any)                    { g.dest().Debug(fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any)                  { g.dest().Debug(fmt.Sprint(args...)) }
func (g grpcLogger) Infof(format string, args ...any)    { g.dest().Debug(fmt.Sprintf(format, args...)) }
func (g grpcLogger) Warning(args ...any)                 { g.dest().Warn(fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any)               { g.dest().Warn(fmt.Sprint(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) { g.dest().Warn(fmt.Sprintf(format, args...)) }
func (g grpcLogger) Error(args ...any)                   { g.dest().Error(fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any)                 { g.dest().Error(fmt.Sprint(args...)) }
func (g grpcLogger) Errorf(format string, args ...any)   { g.dest().Error(fmt.Sprintf(format, args...)) }
func (g grpcLogger) Fatal(args ...any)                   { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalln(args ...any)                 { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalf(format string, args ...any)   { g.fatal(fmt.Sprintf(format, args...)) }
func (g grpcLogger) V(l int) bool                        { return l <= 0 }

func (g grpcLogger) fatal(msg string) {
	g.dest().Error(msg)
	os.Exit(1)
}
