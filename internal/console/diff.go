package console

// maxDiffLines bounds the lines a diff compares after the common start and
// end are set aside: the comparison's table is their product (at most
// 250,000 cells, 1 MB), so a page cannot make the worker allocate more.
const maxDiffLines = 500

// diffLine is one line of a diff: Op is ' ' (both), '-' (only the stored
// body) or '+' (only the conflicting one).
type diffLine struct {
	Op   string
	Text string
}

// diffContext is how many unchanged lines are kept around each change.
const diffContext = 3

// diffLines is a line diff of a against b (longest common subsequence), with
// diffContext unchanged lines around each change and "…" where more were
// left out. It returns nil when the parts that differ have more than
// maxDiffLines lines each.
func diffLines(a, b []string) []diffLine {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(ma) > maxDiffLines || len(mb) > maxDiffLines {
		return nil
	}
	// lcs[i][j]: the longest common subsequence of ma[i:] and mb[j:].
	lcs := make([][]int32, len(ma)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(mb)+1)
	}
	for i := len(ma) - 1; i >= 0; i-- {
		for j := len(mb) - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	all := make([]diffLine, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		all = append(all, diffLine{" ", l})
	}
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		switch {
		case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
			all = append(all, diffLine{" ", ma[i]})
			i, j = i+1, j+1
		case i < len(ma) && (j == len(mb) || lcs[i+1][j] >= lcs[i][j+1]):
			all = append(all, diffLine{"-", ma[i]})
			i++
		default:
			all = append(all, diffLine{"+", mb[j]})
			j++
		}
	}
	for _, l := range a[len(a)-suf:] {
		all = append(all, diffLine{" ", l})
	}
	// Keep the changes and their context.
	keep := make([]bool, len(all))
	for k, l := range all {
		if l.Op != " " {
			for c := max(0, k-diffContext); c <= min(len(all)-1, k+diffContext); c++ {
				keep[c] = true
			}
		}
	}
	out := []diffLine{}
	gap := false
	for k, l := range all {
		if !keep[k] {
			gap = true
			continue
		}
		if gap {
			out = append(out, diffLine{" ", "…"})
			gap = false
		}
		out = append(out, l)
	}
	if gap {
		out = append(out, diffLine{" ", "…"})
	}
	return out
}
