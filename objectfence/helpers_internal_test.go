package objectfence

import (
	"encoding/hex"
	"fmt"
)

func hexDecode(dst []byte, s string) (int, error) { return hex.Decode(dst, []byte(s)) }

func pad(term uint64) string { return fmt.Sprintf("%0*d", termDigits, term) }
