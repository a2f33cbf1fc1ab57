package arena

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listener is a listening TCP socket and the process holding it.
type listener struct {
	ip   net.IP
	port int
	pid  int
}

func (l listener) String() string {
	return fmt.Sprintf("%s (pid %d)", net.JoinHostPort(l.ip.String(), strconv.Itoa(l.port)), l.pid)
}

// groupProcesses returns the live processes in process group pgid, from
// /proc (nil where there is no /proc).
func groupProcesses(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// listeners returns the listening TCP sockets held by pids, matched through
// the socket inodes of their open files.
func listeners(pids []int) ([]listener, error) {
	owner := map[uint64]int{}
	for _, pid := range pids {
		fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			return nil, fmt.Errorf("read the open files of pid %d: %w", pid, err)
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			if s, ok := strings.CutPrefix(target, "socket:["); ok {
				if inode, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
					owner[inode] = pid
				}
			}
		}
	}
	var out []listener
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue // no IPv6
		}
		socks, err := parseProcNetTCP(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, s := range socks {
			if pid, ok := owner[s.inode]; ok && s.listening {
				out = append(out, listener{s.ip, s.port, pid})
			}
		}
	}
	return out, nil
}

// procSocket is one row of /proc/net/tcp or tcp6.
type procSocket struct {
	ip        net.IP
	port      int
	listening bool
	inode     uint64
}

// parseProcNetTCP parses /proc/net/tcp or /proc/net/tcp6: a header line,
// then rows "sl local_address rem_address st ... uid timeout inode ...",
// addresses in hex with each 32-bit word in host (little-endian) order.
func parseProcNetTCP(b []byte) ([]procSocket, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	var out []procSocket
	for line := 0; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if line == 0 || len(f) == 0 {
			continue
		}
		if len(f) < 10 {
			return nil, fmt.Errorf("line %d: %d fields, want at least 10", line+1, len(f))
		}
		host, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("line %d: local address %q", line+1, f[1])
		}
		raw, err := hex.DecodeString(host)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			return nil, fmt.Errorf("line %d: address %q", line+1, host)
		}
		ip := make(net.IP, len(raw))
		for w := 0; w < len(raw); w += 4 {
			for k := range 4 {
				ip[w+k] = raw[w+3-k]
			}
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("line %d: port %q", line+1, portHex)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: inode %q", line+1, f[9])
		}
		out = append(out, procSocket{ip: ip, port: int(port), listening: f[3] == "0A", inode: inode})
	}
	return out, sc.Err()
}

// procUID returns the real user id of pid, or -1.
func procUID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if uid, err := strconv.Atoi(f[0]); err == nil {
					return uid
				}
			}
		}
	}
	return -1
}

// procName returns pid's command name, or "?".
func procName(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
