package redistest

import (
	"os"
	"testing"
)

type runFunc func() int

func (f runFunc) Run() int { return f() }

// Examples read REDIS_ADDR, falling back to 127.0.0.1:6379; ForExamples
// gives them a private server, which tests do not mistake for a shared one,
// and takes it away afterwards. (CI once ran on a machine with nothing on
// 6379: four examples failed.)
func TestForExamples_NamesAPrivateServerOnlyForTheExamples(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	var examples string
	code := ForExamples(runFunc(func() int {
		examples = os.Getenv("REDIS_ADDR")
		if examples == "" {
			t.Error("REDIS_ADDR is unset while the package runs")
			return 1
		}
		if err := ping(examples, nil); err != nil {
			t.Errorf("the examples' server %s does not answer: %v", examples, err)
		}
		s := Start(t)
		if !s.Private() || s.Addr() == examples {
			t.Errorf("Start gave %s (private %v), the examples' server is %s: tests must keep private servers", s.Addr(), s.Private(), examples)
		}
		return 7
	})).Run()
	if code != 7 {
		t.Errorf("Run returned %d, want the package's 7", code)
	}
	if got := os.Getenv("REDIS_ADDR"); got != "" {
		t.Errorf("REDIS_ADDR is %q after Run, want it unset again", got)
	}
	if err := ping(examples, nil); err == nil {
		t.Errorf("the examples' server %s still answers after Run", examples)
	}
}

// A REDIS_ADDR the user set is left alone.
func TestForExamples_KeepsTheUsersServer(t *testing.T) {
	t.Setenv("REDIS_ADDR", "192.0.2.1:6379")
	ForExamples(runFunc(func() int {
		if got := os.Getenv("REDIS_ADDR"); got != "192.0.2.1:6379" {
			t.Errorf("REDIS_ADDR is %q, want the user's", got)
		}
		return 0
	})).Run()
}
