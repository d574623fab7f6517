package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds special tokens around an encoded single sequence
// when add_special_tokens is requested.
type postProcessor interface {
	process(ids []int) []int
}

// templatePiece is one element of TemplateProcessing's "single" list.
type templatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

// templateSpecial is one entry of TemplateProcessing's "special_tokens".
type templateSpecial struct {
	ID  string `json:"id"`
	IDs []int  `json:"ids"`
}

// tokenAndID is the ["<s>", 0] form Bert/Roberta processors use.
type tokenAndID struct {
	Token string
	ID    int
}

func (t *tokenAndID) UnmarshalJSON(data []byte) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(data, &pair); err != nil {
		return err
	}
	if len(pair) != 2 {
		return fmt.Errorf("want [token, id], got %d elements", len(pair))
	}
	if err := json.Unmarshal(pair[0], &t.Token); err != nil {
		return err
	}
	return json.Unmarshal(pair[1], &t.ID)
}

func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := parseComponent(raw, "post_processor")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil // adjusts offsets only
	case "TemplateProcessing":
		return parseTemplate(c)
	case "BertProcessing", "RobertaProcessing":
		if c.Cls == nil || c.Sep == nil {
			return nil, fmt.Errorf("post_processor %s: missing cls or sep", c.Type)
		}
		return wrapProcessor{before: []int{c.Cls.ID}, after: []int{c.Sep.ID}}, nil
	case "Sequence":
		var seq postSequence
		for i, sub := range c.Processors {
			p, err := parsePostProcessor(sub)
			if err != nil {
				return nil, fmt.Errorf("post_processor Sequence[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("unsupported post_processor type %q", c.Type)
}

// wrapProcessor puts fixed ids before and after the sequence.
type wrapProcessor struct{ before, after []int }

func (w wrapProcessor) process(ids []int) []int {
	out := make([]int, 0, len(w.before)+len(ids)+len(w.after))
	out = append(out, w.before...)
	out = append(out, ids...)
	return append(out, w.after...)
}

func parseTemplate(c *component) (postProcessor, error) {
	var w wrapProcessor
	seen := false
	for i, p := range c.Single {
		switch {
		case p.Sequence != nil:
			if p.Sequence.ID != "A" || seen {
				return nil, fmt.Errorf("post_processor TemplateProcessing: single[%d] must be the one $A", i)
			}
			seen = true
		case p.SpecialToken != nil:
			st, ok := c.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("post_processor TemplateProcessing: special token %q not in special_tokens", p.SpecialToken.ID)
			}
			if seen {
				w.after = append(w.after, st.IDs...)
			} else {
				w.before = append(w.before, st.IDs...)
			}
		default:
			return nil, fmt.Errorf("post_processor TemplateProcessing: single[%d] is neither Sequence nor SpecialToken", i)
		}
	}
	if !seen {
		return nil, fmt.Errorf("post_processor TemplateProcessing: single has no $A")
	}
	return w, nil
}

type postSequence []postProcessor

func (seq postSequence) process(ids []int) []int {
	for _, p := range seq {
		ids = p.process(ids)
	}
	return ids
}
