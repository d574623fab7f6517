package forward

// Point names an intermediate tensor of the forward that an Observer sees.
type Point int

// The points, in the order a layer computes them. Shapes are per call, for
// T tokens (H hidden, QD = heads*head_dim, KVD = kv_heads*head_dim,
// I = intermediate). Scores and Probs are ragged: data holds only the
// entries a query may see (causal and inside the window), flattened, and
// cols = len(data).
const (
	HiddenIn   Point = iota // [T, H] residual stream entering the layer
	AttnNorm                // [T, H] input_layernorm output: input of q_k_v_proj and g_proj
	Q                       // [T, QD] queries before RoPE
	K                       // [T, KVD] keys before RoPE
	V                       // [T, KVD] values (what the V cache holds)
	QRoPE                   // [T, QD] queries after RoPE
	KRoPE                   // [T, KVD] keys after RoPE (what the K cache holds)
	Scores                  // q.k/sqrt(head_dim) of visible keys (ragged)
	Probs                   // softmax of Scores (ragged)
	Attn                    // [T, QD] probs @ v, before the gate
	GateLogits              // [T, heads] h @ g_proj^T
	Gate                    // [T, heads] sigmoid(GateLogits)
	AttnGated               // [T, QD] Attn * Gate per head: input of o_proj
	AttnOut                 // [T, H] o_proj output
	HiddenMid               // [T, H] residual after attention
	MLPNorm                 // [T, H] post_attention_layernorm output: input of gate_proj and up_proj
	MLPGate                 // [T, I] gate_proj output
	MLPGELU                 // [T, I] gelu(MLPGate)
	MLPUp                   // [T, I] up_proj output
	MLPAct                  // [T, I] MLPGELU * MLPUp: input of down_proj
	MLPOut                  // [T, H] down_proj output
	HiddenOut               // [T, H] residual leaving the layer
	FinalNorm               // [T, H] model level: rmsnorm(last residual) * model.norm.weight, input of the head
	Logits                  // [T, n] model level: a block of n vocabulary columns of the logits
	numPoints
)

// ModelLevel is the layer index passed with the model-level points.
const ModelLevel = -1

var pointNames = [...]string{
	"hidden_in", "attn_norm", "q", "k", "v", "q_rope", "k_rope", "scores", "probs",
	"attn", "gate_logits", "gate", "attn_gated", "attn_out", "hidden_mid",
	"mlp_norm", "mlp_gate", "mlp_gelu", "mlp_up", "mlp_act", "mlp_out", "hidden_out",
	"final_norm", "logits",
}

// String is the point's snake_case name, as calibration files use it.
func (p Point) String() string {
	if p >= 0 && p < numPoints {
		return pointNames[p]
	}
	return "point?"
}

// LayerPoints lists the per-layer points in computation order.
func LayerPoints() []Point {
	var ps []Point
	for p := HiddenIn; p <= HiddenOut; p++ {
		ps = append(ps, p)
	}
	return ps
}

// Observer sees intermediate tensors. Observe is called from the forward's
// goroutine, in computation order; data is row-major [rows, cols] and valid
// only during the call (it must not be modified). layer is ModelLevel for
// FinalNorm and Logits.
type Observer interface {
	Observe(layer int, p Point, data []float32, cols int)
}
