package yamlout

import "unicode"

// naturalKeys orders map keys as yaml.v3 does when it encodes a Go map of strings: runs of
// digits compare by value, letters before other characters (go.yaml.in/yaml/v3 sorter.go).
type naturalKeys []string

func (l naturalKeys) Len() int      { return len(l) }
func (l naturalKeys) Swap(i, j int) { l[i], l[j] = l[j], l[i] }
func (l naturalKeys) Less(i, j int) bool {
	if isSimpleKey(l[i]) && isSimpleKey(l[j]) {
		return l[i] < l[j] // no digits or non-letters: the natural order is the byte order
	}
	ar, br := []rune(l[i]), []rune(l[j])
	digits := false
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			digits = unicode.IsDigit(ar[i])
			continue
		}
		al := unicode.IsLetter(ar[i])
		bl := unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			if digits {
				return al
			}
			return bl
		}
		var ai, bi int
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an = 1
					bn = 1
					break
				}
			}
		}
		for ai = i; ai < len(ar) && unicode.IsDigit(ar[ai]); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		for bi = i; bi < len(br) && unicode.IsDigit(br[bi]); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}

// isSimpleKey: ASCII letters only.
func isSimpleKey(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLetter(s[i]) {
			return false
		}
	}
	return true
}
