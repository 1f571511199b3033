package resp

import (
	"strings"

	"github.com/tidwall/redcon"

	"idserver/engine"
)

// publicCommands issue IDs in their public form: a keyed permutation that
// hides order and volume, which DECODE id PUBLICID (or PUBLICGENEID)
// reverses (engine.PublicIDs).
func publicCommands() []*command {
	return []*command{
		{name: "publicid", arity: -1, flags: []string{"write", "fast"}, summary: "Issue a snowflake ID, or count of them, in public form: a keyed permutation of its bits", handler: cmdPublicID},
		{name: "publicgeneid", arity: -2, flags: []string{"write", "fast"}, summary: "Issue a gene ID, or count of them, in public form: the bits above the gene permuted, the gene kept", handler: cmdPublicGeneID},
	}
}

// SetPublicIDs gives the server the cluster's public-ID permutation, once
// the key is known; until then PUBLICID, PUBLICGENEID and DECODE of a
// public form answer TRYAGAIN.
func (s *Server) SetPublicIDs(p *engine.PublicIDs) { s.public.Store(p) }

// publicIDs is the permutation, or nil after writing TRYAGAIN.
func (s *Server) publicIDs(conn redcon.Conn) *engine.PublicIDs {
	p := s.public.Load()
	if p == nil {
		s.errorReply(conn, "TRYAGAIN the cluster has not stored its public-ID key yet (no leader since this node started)")
	}
	return p
}

// cmdPublicID answers PUBLICID [count]: NEXTID's reply, each ID in public form.
func cmdPublicID(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	n, ok := s.optionalCount(conn, "publicid", args)
	if !ok {
		return
	}
	p := s.publicIDs(conn)
	if p == nil {
		return
	}
	ids, err := s.ids.NextIDs(c.ids[:0], n)
	c.ids = ids[:0]
	if err != nil {
		s.engineError(conn, err)
		return
	}
	if err := p.Hide(ids); err != nil {
		s.errorReply(conn, "ERR "+err.Error())
		return
	}
	s.writeIDs(c, conn, ids, len(args) == 2)
}

// cmdPublicGeneID answers PUBLICGENEID buyer [count]: GENEID's reply, each
// ID in public form with its gene bits kept, so it routes as the ID does.
func cmdPublicGeneID(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	gene, n, ok := s.buyerAndCount(conn, "publicgeneid", args)
	if !ok {
		return
	}
	p := s.publicIDs(conn)
	if p == nil {
		return
	}
	ids, err := s.ids.GeneIDs(c.ids[:0], gene, n)
	c.ids = ids[:0]
	if err != nil {
		s.engineError(conn, err)
		return
	}
	if err := p.HideKeepGene(ids); err != nil {
		s.errorReply(conn, "ERR "+err.Error())
		return
	}
	s.writeIDs(c, conn, ids, len(args) == 3)
}

// decodePublic answers DECODE value PUBLICID|PUBLICGENEID: the ID the
// public form stands for, then DECODE's fields of that ID. The second
// argument names the command the value came from: a public form is a
// number like any ID, and the same number is usually a valid ID and a
// valid public form of both kinds, each standing for another ID, so only
// the caller can say which it holds.
func (s *Server) decodePublic(c *client, conn redcon.Conn, args [][]byte) {
	if len(args) > 3 {
		s.errorReply(conn, wrongArity("decode"))
		return
	}
	keepGene := strings.EqualFold(string(args[2]), "publicgeneid")
	if !keepGene && !strings.EqualFold(string(args[2]), "publicid") {
		s.errorReply(conn, "ERR syntax error: DECODE value PUBLICID or DECODE value PUBLICGENEID")
		return
	}
	x, ok := parseInt64(args[1])
	if !ok {
		s.errorReply(conn, "ERR invalid id")
		return
	}
	p := s.publicIDs(conn)
	if p == nil {
		return
	}
	id := append(c.ids[:0], x)
	c.ids = id[:0]
	reveal := p.Reveal
	if keepGene {
		reveal = p.RevealKeepGene
	}
	if err := reveal(id); err != nil {
		s.errorReply(conn, "ERR invalid id")
		return
	}
	s.writeDecoded(c, conn, id[0], true)
}
