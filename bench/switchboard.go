package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// switchboardKinds are Switchboard's four kinds of traffic.
var switchboardKinds = []string{"agent", "chat", "prefix", "long"}

// The shapes of Switchboard's traffic, which its seed text leaves open;
// the package doc explains the choices. Lengths are tokens at scale 1.
const (
	agentSessionsPerUser = 2
	agentTurns           = 8
	agentFirstLen        = 2048 // the task: instructions, tool schemas, files
	agentTurnLen         = 512  // each later turn: a tool result (±25%)
	agentOutput          = 192

	chatBurstsPerUser = 4
	chatBurstSize     = 4
	chatPromptLen     = 512 // ±50%
	chatOutput        = 256 // ±50%

	prefixGroups          = 4
	prefixLen             = 2048
	prefixRequestsPerUser = 16
	prefixSuffixLen       = 256 // ±50%
	prefixOutput          = 128

	longPerUser = 2
	longLen     = 32000 // ±20%
	longOutput  = 256

	// The mixed replay gives each user one agent session, two chat bursts,
	// four shared-prefix requests and one long context, in a random order.
	mixedChatBursts    = 2
	mixedPrefixQueries = 4
	mixedLong          = 1
)

// switchboard builds one kind (or "mixed") at one load level: level users,
// each sending its next request when its previous one (or burst) is done.
func (b *builder) switchboard(kind string, level int) (Phase, error) {
	name := fmt.Sprintf("%s@%d", kind, level)
	g, err := b.gen("switchboard-" + name)
	if err != nil {
		return Phase{}, err
	}
	sb := sbGen{b: b, g: g}
	if kind == "prefix" || kind == "mixed" {
		for range prefixGroups {
			sb.prefixes = append(sb.prefixes, g.randomIDs(b.scaleLen(prefixLen)))
		}
	}
	ph := Phase{PhaseInfo: PhaseInfo{Name: name, Group: kind, Load: float64(level), LoadUnit: "users",
		Burstiness: 1, IgnoreEOS: b.ignoreEOS(true), NumUsers: level}}
	order := rand.New(rand.NewPCG(b.spec.Seed, uint64(level)))
	for u := range level {
		var s []Session
		switch kind {
		case "agent":
			for range b.scaleCount(agentSessionsPerUser) {
				s = append(s, sb.agent())
			}
		case "chat":
			for range b.scaleCount(chatBurstsPerUser) {
				s = append(s, sb.chatBurst())
			}
		case "prefix":
			for j := range b.scaleCount(prefixRequestsPerUser) {
				s = append(s, sb.prefix(u+j))
			}
		case "long":
			for range b.scaleCount(longPerUser) {
				s = append(s, sb.long())
			}
		case "mixed":
			s = append(s, sb.agent())
			for range b.scaleCount(mixedChatBursts) {
				s = append(s, sb.chatBurst())
			}
			for j := range b.scaleCount(mixedPrefixQueries) {
				s = append(s, sb.prefix(u+j))
			}
			for range b.scaleCount(mixedLong) {
				s = append(s, sb.long())
			}
			shuffle(order, s)
		default:
			return Phase{}, fmt.Errorf("bench: unknown Switchboard traffic kind %q", kind)
		}
		for _, se := range s {
			for _, st := range se.Steps {
				ph.Requests += len(st.Requests)
			}
		}
		ph.Users = append(ph.Users, User{Sessions: s})
	}
	return ph, nil
}

type sbGen struct {
	b        *builder
	g        *promptGen
	prefixes [][]int
}

func (s *sbGen) one(kind, endpoint string, prefix []int, inputLen, output int) RequestSpec {
	text, n := s.g.prompt(prefix, inputLen, 0)
	return RequestSpec{Kind: kind, Endpoint: endpoint, Prompt: text, PromptLen: n, MaxTokens: output}
}

func (s *sbGen) agent() Session {
	turns := max(2, int(math.Round(agentTurns*s.b.spec.Scale)))
	se := Session{MultiTurn: true}
	for t := range turns {
		l := s.b.scaleLen(agentFirstLen)
		if t > 0 {
			l = s.g.inputLengths(1, s.b.scaleLen(agentTurnLen), 0.25)[0]
		}
		r := s.one("agent", Chat, nil, max(l, 1), s.b.scaleLen(agentOutput))
		se.Steps = append(se.Steps, Step{Requests: []RequestSpec{r}})
	}
	return se
}

func (s *sbGen) chatBurst() Session {
	ins := s.g.inputLengths(chatBurstSize, s.b.scaleLen(chatPromptLen), 0.5)
	outs := s.g.lengths(chatBurstSize, s.b.scaleLen(chatOutput), 0.5, 1)
	var st Step
	for i := range chatBurstSize {
		st.Requests = append(st.Requests, s.one("chat", Chat, nil, max(ins[i], 1), outs[i]))
	}
	return Session{Steps: []Step{st}}
}

func (s *sbGen) prefix(group int) Session {
	l := s.g.inputLengths(1, s.b.scaleLen(prefixSuffixLen), 0.5)[0]
	r := s.one("prefix", Completions, s.prefixes[group%len(s.prefixes)], l, s.b.scaleLen(prefixOutput))
	return Session{Steps: []Step{{Requests: []RequestSpec{r}}}}
}

func (s *sbGen) long() Session {
	l := s.g.inputLengths(1, s.b.scaleLen(longLen), 0.2)[0]
	r := s.one("long", Completions, nil, max(l, 1), s.b.scaleLen(longOutput))
	return Session{Steps: []Step{{Requests: []RequestSpec{r}}}}
}
