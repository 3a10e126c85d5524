package jupyter

import (
	"slices"
	"strings"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"fits", 10, []string{"abc", "def"}, "abcdef"},
		{"exactly full", 6, []string{"abc", "def"}, "abcdef"},
		{"wraps", 5, []string{"abc", "def"}, "bcdef"},
		{"wraps many times", 4, []string{"ab", "cd", "ef", "g", "hij"}, "ghij"},
		{"one big write", 3, []string{"a", "bcdefg"}, "efg"},
		{"big write when full", 3, []string{"abc", "defgh", "i"}, "ghi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newTailBuffer(tt.max)
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("write = %d, %v", n, err)
				}
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTailBufferStaysBounded(t *testing.T) {
	t.Parallel()
	b := newTailBuffer(1024)
	chunk := strings.Repeat("x", 700)
	for range 1000 {
		_, _ = b.Write([]byte(chunk))
	}
	if got := len(b.String()); got != 1024 || cap(b.buf) > 2048 {
		t.Errorf("len %d cap %d", got, cap(b.buf))
	}
}

func TestTailLines(t *testing.T) {
	tests := []struct {
		name  string
		max   int
		write string
		n     int
		want  []string
	}{
		{"nothing", 64, "", 5, nil},
		{"all", 64, "a\nb\nc\n", 5, []string{"a", "b", "c"}},
		{"last n", 64, "a\nb\nc\n", 2, []string{"b", "c"}},
		{"no final newline", 64, "a\nb", 5, []string{"a", "b"}},
		{"cut first line dropped", 8, "xxxxxx\nyy\nzz\n", 5, []string{"yy", "zz"}},
		{"one cut line", 4, "xxxxxxxx", 5, nil},
	}
	for _, tt := range tests {
		b := newTailBuffer(tt.max)
		b.Write([]byte(tt.write))
		if got := b.Lines(tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Lines(%d) = %q, want %q", tt.name, tt.n, got, tt.want)
		}
	}
}

func TestTailLinesFrom(t *testing.T) {
	tests := []struct {
		name  string
		write string
		mark  string
		n     int
		want  []string
	}{
		{"no such line", "a\nb\n", "k1", 5, nil},
		{"from the first holding it", "a\nstart k1\nb\nend k1\nc\n", "k1", 5, []string{"start k1", "b", "end k1", "c"}},
		{"first and last halves", "k1\n1\n2\n3\n4\n5\n6\n", "k1", 5, []string{"k1", "1", "[... 3 lines ...]", "5", "6"}},
		{"exactly n", "k1\n1\n2\n", "k1", 3, []string{"k1", "1", "2"}},
		{"one line: the last", "k1\n1\n2\n", "k1", 1, []string{"2"}},
		{"none wanted", "k1\n", "k1", 0, nil},
	}
	for _, tt := range tests {
		b := newTailBuffer(256)
		b.Write([]byte(tt.write))
		if got := b.LinesFrom(tt.mark, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("%s: LinesFrom(%q, %d) = %q, want %q", tt.name, tt.mark, tt.n, got, tt.want)
		}
	}
}
