package sqlfence

// SkipDurableCheck makes f raise on any SQLite settings, for the control of
// the power-loss test.
func SkipDurableCheck(f *Fence) { f.noDurableCheck = true }
