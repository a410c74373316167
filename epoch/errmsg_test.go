package epoch_test

import (
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
)

// TestShortKeyMessage: a short key without an ID is "HMAC key is N bytes"
// (an empty ID printed as "" read as "your key is empty"); with an ID the
// message names it.
func TestShortKeyMessage(t *testing.T) {
	_, err := epoch.NewHMAC([]byte("short"))
	if err == nil || strings.Contains(err.Error(), `""`) || !strings.Contains(err.Error(), "HMAC key is 5 bytes") {
		t.Errorf("NewHMAC(5 bytes): %v, want \"HMAC key is 5 bytes\" and no empty ID", err)
	}
	_, err = epoch.NewHMACKeys(epoch.HMACKey{ID: "k1", Secret: []byte("short")})
	if err == nil || !strings.Contains(err.Error(), `HMAC key with ID "k1" is 5 bytes`) {
		t.Errorf("NewHMACKeys(k1, 5 bytes): %v, want the ID named", err)
	}
}

// TestZeroEpochString: the zero Epoch (no epoch) prints as "", not "/0/".
func TestZeroEpochString(t *testing.T) {
	if s := (epoch.Epoch{}).String(); s != "" {
		t.Errorf("Epoch{}.String() = %q, want \"\"", s)
	}
	if s := (epoch.Epoch{Cluster: "c", Term: 1, Leader: "n1"}).String(); s != "c/1/n1" {
		t.Errorf("String() = %q", s)
	}
}
