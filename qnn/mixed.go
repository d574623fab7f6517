package qnn

import "strings"

// This file is what a mixed recipe (w4a16, Precision's HeadBits, KVBits,
// EmbedBits) keeps at other bit widths than its weights and activations,
// after qai-hub-models' LLM quantization (docs/qnn.md#w4a16): the head's
// weights at 8 bits per channel (_set_lm_head_to_8b), the KV cache's inputs
// and outputs, and everything tied to them, at 8 bits symmetric
// (_set_tensors_to_output_8b_sym), the embedding table at 16.

// ParamBits is the bit width of parameter pr under prec: HeadBits for the
// head's weights, EmbedBits for a Gather's table, WeightBits for the other
// MatMul weights, and at least 8 for every other constant (norm weights and
// scalars, one grid per tensor: 4 bits would leave 15 levels for a whole
// norm's weights).
func (p *EncodingPlan) ParamBits(prec Precision, pr Param) int {
	switch {
	case p.head[pr.Name] && prec.HeadBits != 0:
		return prec.HeadBits
	case p.isGatherTable(pr.Name) && prec.EmbedBits != 0:
		return prec.EmbedBits
	case pr.Axis == 1:
		return prec.WeightBits
	}
	return max(prec.WeightBits, 8)
}

// Head reports whether the parameter is a head weight (a MatMul weight
// whose product is a graph output: the logits).
func (p *EncodingPlan) Head(name string) bool { return p.head[name] }

func (p *EncodingPlan) isGatherTable(name string) bool {
	for _, t := range p.GatherOf {
		if t == name {
			return true
		}
	}
	return false
}

// KVGroups are the tie groups that hold a KV cache input (past_key*,
// past_value*): with them, its new_*/present_* output, the keys and values
// computed in the step and the Concat joining them to the cache.
func (p *EncodingPlan) KVGroups() map[string]bool {
	out := map[string]bool{}
	for _, a := range p.Acts {
		if strings.HasPrefix(a, "past_key") || strings.HasPrefix(a, "past_value") {
			out[p.find(a)] = true
		}
	}
	return out
}

// kvGroups are the KV groups prec encodes at KVBits (none when KVBits is 0).
func (p *EncodingPlan) kvGroups(prec Precision) map[string]bool {
	if prec.KVBits == 0 {
		return nil
	}
	return p.KVGroups()
}
