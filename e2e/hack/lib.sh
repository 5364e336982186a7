# Shared by the e2e/hack/build-*.sh peer builds; each sets NAME (its log prefix) and CACHE
# before sourcing this file.

log() { echo "[$NAME] $*" >&2; }

# timed NAME COMMAND...: runs the command and logs how long it took.
timed() {
  local what=$1 start=$SECONDS; shift
  "$@"
  log "$what ready in $((SECONDS - start))s"
}

# moddir MODULE VERSION: the module's read-only source in the module cache.
moddir() {
  GOFLAGS=-mod=mod go mod download -json "$1@$2" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'
}

# workcopy NAME MODULE VERSION: a writable copy of the module's source under $CACHE/src/NAME.
workcopy() {
  local work=$CACHE/src/$1 src
  src=$(cd "$CACHE" && moddir "$2" "$3")
  rm -rf "$work"; mkdir -p "$work"
  cp -r "$src/." "$work/"; chmod -R u+w "$work"
  echo "$work"
}
