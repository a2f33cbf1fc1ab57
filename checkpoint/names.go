package checkpoint

// CompareNames orders tensor or module names as people read them: runs of
// digits compare by value, so layers.2 sorts before layers.10 (and, for
// equal values, "1" before "01"); everything else compares bytewise. It is a
// total order, for slices.SortFunc.
func CompareNames(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da > 0 && db > 0 {
			na, nb := trimZeros(a[:da]), trimZeros(b[:db])
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
			if da != db { // equal values, "01" after "1"
				return da - db
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingDigits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}
