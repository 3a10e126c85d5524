package testutil

import (
	"strings"
)

// DockerInstr is one instruction of a Dockerfile: continuation lines
// joined, comments dropped, its arguments' whitespace collapsed.
type DockerInstr struct {
	Cmd  string // upper case: FROM, RUN, COPY, ...
	Args string
}

// ParseDockerfile reads a Dockerfile's instructions, enough for tests to
// check a recipe without a Docker engine.
func ParseDockerfile(text string) []DockerInstr {
	var out []DockerInstr
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(trimmed)
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			continue
		}
		cmd, args, _ := strings.Cut(s, " ")
		out = append(out, DockerInstr{Cmd: strings.ToUpper(cmd), Args: strings.Join(strings.Fields(args), " ")})
	}
	return out
}
