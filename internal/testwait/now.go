package testwait

import (
	"os"
	"strconv"
)

// FactorNow is Factor with the load average read now rather than when the
// package was first used: for a long run (a chaos run of minutes) whose
// machine got busier since it began. At least 1.
func FactorNow() float64 {
	f := 1.0
	if v, err := strconv.ParseFloat(os.Getenv(ScaleEnv), 64); err == nil && v > 1 {
		f = v
	}
	return f * loadFactor()
}
