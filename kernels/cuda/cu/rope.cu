// rope.cu: NeoX-style rotary embedding, in place.
// Layout: x [T, heads, head_dim] float32; pos [T] int32. For j < rot/2 the
// pair (x[j], x[j + rot/2]) of each head rotates by pos·inv_freq[j], with
// inv_freq[j] = theta^(-2j/rot); the angle, its sine and cosine are computed
// in float64 and rounded to float32, as the contract (kernels.Ops) says.
// One thread per (token, head, pair).
extern "C" __global__ void lb_rope(float *x, const int *pos, int T, int heads, int head_dim, int rot, double theta) {
	lb_pdl_wait();
	int half = rot / 2;
	i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= (i64)T * heads * half) return;
	int j = (int)(idx % half);
	i64 th = idx / half;
	int t = (int)(th / heads);
	float *h = x + th * head_dim;
	double inv = pow(theta, -2.0 * (double)j / (double)rot);
	double ang = (double)pos[t] * inv;
	float c = (float)cos(ang), s = (float)sin(ang);
	float a = h[j], b = h[j + half];
	h[j] = a * c - b * s;
	h[j + half] = b * c + a * s;
}
