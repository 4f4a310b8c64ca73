// CudnnAttention: causal SDPA forward and backward through cuDNN's frontend graph API, with
// graphs planned once per problem and cached. See cudnn_attention.h.
#include "backend/cuda/cudnn_attention.h"

#include "core/error.h"

#ifdef PPTRAIN_WITH_CUDNN

#include <cudnn.h>

#include <cmath>
#include <compare>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cudnn_frontend.h>

#include "backend/cuda/cuda_check.h"

namespace pptrain::cuda {
namespace {

namespace fe = cudnn_frontend;

enum class Direction { forward, backward };

// One cached graph per problem. The strides follow from the shape, so the shape is the key.
struct Problem {
  int b = 0, t = 0, nh = 0, nkv = 0, hd = 0;
  DType dtype = DType::bf16;
  Direction direction = Direction::forward;
  auto operator<=>(const Problem&) const = default;
};

const char* op_name(Direction d) {
  return d == Direction::forward ? "flash_attention_forward" : "flash_attention_backward_input";
}

// "flash_attention_forward (model.attention: cudnn, B=2 T=200 NH=4 HD=64 bf16)"
std::string describe(const Problem& p) {
  return cat(op_name(p.direction), " (model.attention: cudnn, B=", p.b, " T=", p.t, " NH=", p.nh, " NKV=", p.nkv,
             " HD=", p.hd, " ", dtype_name(p.dtype), ")");
}

// The frontend's messages may span lines; an error is one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Fails with "<op> (model.attention: cudnn, <shape>): <step> failed on rank R, device D: <why>".
void check(fe::error_t status, const Problem& p, const char* step) {
  if (status.is_good()) return;
  fail(describe(p), ": cudnn_frontend ", step, " failed on ", where(), ": ", one_line(status.get_message()));
}

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  fail("model.attention: cudnn: ", call, " failed on ", where(), ": ", cudnnGetErrorString(status));
}

// An owned cuDNN handle whose work is queued on one stream.
class CudnnHandle {
 public:
  explicit CudnnHandle(cudaStream_t stream) {
    check_cudnn(cudnnCreate(&handle_), "cudnnCreate");
    const cudnnStatus_t bound = cudnnSetStream(handle_, stream);
    if (bound != CUDNN_STATUS_SUCCESS) (void)cudnnDestroy(handle_);  // the destructor will not run
    check_cudnn(bound, "cudnnSetStream");
  }
  ~CudnnHandle() { (void)cudnnDestroy(handle_); }
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

// Tensor uids of the variant pack (the device pointers of one execution).
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// cuDNN's SDPA tensors are [B, heads, T, HD] with arbitrary strides; ours are views:
//  - Q, K, V (and dQ, dK, dV) inside qkv[B,T,W], W = (NH + 2·NKV)·HD: element (b, h, t, d)
//    of Q is at b·T·W + t·W + h·HD + d, i.e. dims [B, NH, T, HD] and strides [T·W, HD, W, 1];
//    K and V are [B, NKV, T, HD] with the same strides from qkv + NH·HD and qkv + (NH + NKV)·HD
//    (each row is all query heads, then the key heads, then the value heads). With NKV < NH
//    (grouped-query attention) cuDNN lets query head h attend with key/value head
//    h / (NH/NKV), the grouping of ops.h (Hugging Face's repeat_kv), and its backward sums
//    dK and dV over each group's query heads, which is the op's contract;
//  - O and dO inside out[B,T,NH·HD], C = NH·HD: strides [T·C, HD, C, 1];
//  - the statistics, [B, NH, T, 1] fp32 with strides [NH·T, T, 1, 1]: exactly the row-major
//    lse[B,NH,T] of ops.h, which is what cuDNN stores there: the natural log-sum-exp of the
//    scaled scores, max_j s_ij + log Σ_j exp(s_ij − max_j s_ij) with s = q·k/√HD (natural
//    log unless set_stats_use_log2, which is not set). The backward graph reads it with the
//    same layout, so forward and backward of this backend agree by construction, and the
//    values match the op's contract (the flash kernels' lse) as well.
struct Layout {
  std::vector<int64_t> dims, kv_dims, qkv_strides, out_strides, stats_dims, stats_strides;
  explicit Layout(const Problem& p) {
    const int64_t b = p.b, t = p.t, nh = p.nh, nkv = p.nkv, hd = p.hd, c = nh * hd, w = (nh + 2 * nkv) * hd;
    dims = {b, nh, t, hd};
    kv_dims = {b, nkv, t, hd};
    qkv_strides = {t * w, hd, w, 1};
    out_strides = {t * c, hd, c, 1};
    stats_dims = {b, nh, t, 1};
    stats_strides = {nh * t, t, 1, 1};
  }
};

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

TensorPtr input(fe::graph::Graph& g, const char* name, Uid uid, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& strides) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

void mark_output(const TensorPtr& x, Uid uid, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  x->set_output(true).set_uid(uid).set_dim(dims).set_stride(strides);
}

// The forward graph: O and the statistics from Q, K, V, causal (query i sees keys j ≤ i:
// the diagonal band's right bound 0 from the top-left corner), scale 1/√HD.
void add_forward(fe::graph::Graph& g, const Problem& p, const Layout& l) {
  TensorPtr q = input(g, "Q", kQ, l.dims, l.qkv_strides), k = input(g, "K", kK, l.kv_dims, l.qkv_strides),
            v = input(g, "V", kV, l.kv_dims, l.qkv_strides);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)  // training: keep the statistics for backward
                     .set_attn_scale(1.0f / std::sqrt(float(p.hd)))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  auto [o, stats] = g.sdpa(q, k, v, options);
  mark_output(o, kO, l.dims, l.out_strides);
  mark_output(stats, kStats, l.stats_dims, l.stats_strides);
  stats->set_data_type(fe::DataType_t::FLOAT);
}

// The backward graph: dQ, dK, dV from Q, K, V, O, dO and the forward's statistics.
void add_backward(fe::graph::Graph& g, const Problem& p, const Layout& l) {
  TensorPtr q = input(g, "Q", kQ, l.dims, l.qkv_strides), k = input(g, "K", kK, l.kv_dims, l.qkv_strides),
            v = input(g, "V", kV, l.kv_dims, l.qkv_strides), o = input(g, "O", kO, l.dims, l.out_strides),
            d_o = input(g, "dO", kDO, l.dims, l.out_strides),
            stats = input(g, "Stats", kStats, l.stats_dims, l.stats_strides);
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_attn_scale(1.0f / std::sqrt(float(p.hd)))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, options);
  mark_output(dq, kDQ, l.dims, l.qkv_strides);
  mark_output(dk, kDK, l.kv_dims, l.qkv_strides);
  mark_output(dv, kDV, l.kv_dims, l.qkv_strides);
}

// A workspace block from the caching allocator, released when the call's work is queued
// (stream order keeps it alive for that work, see caching_allocator.h).
class Scratch {
 public:
  Scratch(CachingAllocator& allocator, size_t bytes) : allocator_(allocator), p_(allocator.allocate(bytes)) {}
  ~Scratch() { allocator_.release(p_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }

 private:
  CachingAllocator& allocator_;
  void* p_;
};

// bytes of `n` elements of the problem's dtype past `p`
void* offset(const void* p, int64_t n, DType dtype) {
  return static_cast<char*>(const_cast<void*>(p)) + n * int64_t(dtype_size(dtype));
}

}  // namespace

struct CudnnAttention::Impl {
  struct Plan {
    fe::graph::Graph graph;
    int64_t workspace_bytes = 0;
  };

  Impl(cudaStream_t stream, CachingAllocator& a) : handle(stream), allocator(a) {}

  Plan& plan(const Problem& p) {
    auto it = plans.find(p);
    if (it != plans.end()) return *it->second;
    auto plan = std::make_unique<Plan>();
    fe::graph::Graph& g = plan->graph;
    // bf16 in and out, fp32 softmax and accumulation.
    g.set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const Layout layout(p);
    if (p.direction == Direction::forward)
      add_forward(g, p, layout);
    else
      add_backward(g, p, layout);
    check(g.validate(), p, "Graph::validate");
    check(g.build_operation_graph(handle.get()), p, "Graph::build_operation_graph");
    check(g.create_execution_plans({fe::HeurMode_t::A}), p, "Graph::create_execution_plans");
    check(g.check_support(), p, "Graph::check_support");
    check(g.build_plans(), p, "Graph::build_plans");
    check(g.get_workspace_size(plan->workspace_bytes), p, "Graph::get_workspace_size");
    return *plans.emplace(p, std::move(plan)).first->second;
  }

  void execute(const Problem& p, std::unordered_map<int64_t, void*>& pointers) {
    Plan& pl = plan(p);
    Scratch workspace(allocator, size_t(pl.workspace_bytes));
    check(pl.graph.execute(handle.get(), pointers, workspace.get()), p, "Graph::execute");
  }

  CudnnHandle handle;
  CachingAllocator& allocator;
  std::map<Problem, std::unique_ptr<Plan>> plans;
};

namespace {

// What cuDNN's SDPA takes, checked before any planning so the message names our terms.
void check_problem(const Problem& p, std::initializer_list<std::pair<const char*, const void*>> buffers,
                   std::initializer_list<DType> dtypes) {
  for (DType d : dtypes)
    if (d != DType::bf16)
      fail(describe(p), ": cuDNN's fused attention takes bf16 tensors, got ", dtype_name(d),
           " (set training.precision: bf16)");
  if (p.b < 0 || p.t < 1 || p.nh < 1 || p.nkv < 1 || p.nh % p.nkv)
    fail(describe(p), ": expected B >= 0, T >= 1, NH >= 1 and NKV dividing NH");
  if (p.hd % 8 != 0 || p.hd < 8 || p.hd > 128)
    fail(describe(p), ": cuDNN's fused attention needs a head size HD that is a multiple of 8 and at most 128");
  // The kernels load 16-byte vectors (and use TMA on Hopper): every tensor start must be
  // 16-byte aligned. K and V are NH·HD and (NH + NKV)·HD elements past Q, multiples of 8
  // elements (16 bytes) since HD is: aligned too.
  for (const auto& [name, ptr] : buffers)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      fail(describe(p), ": cuDNN needs 16-byte aligned buffers, got ", name, " at ", ptr);
}

}  // namespace

CudnnAttention::CudnnAttention(cudaStream_t stream, CachingAllocator& allocator)
    : impl_(std::make_unique<Impl>(stream, allocator)) {}
CudnnAttention::~CudnnAttention() = default;

size_t CudnnAttention::graphs() const { return impl_->plans.size(); }

void CudnnAttention::forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int nkv, int hd) {
  const Problem p{b, t, nh, nkv, hd, qkv.dtype, Direction::forward};
  check_problem(p, {{"out", out.data}, {"lse", lse}, {"qkv", qkv.data}}, {out.dtype, qkv.dtype});
  if (b == 0) return;
  const int64_t k0 = int64_t(nh) * hd, v0 = int64_t(nh + nkv) * hd;  // where K and V start in a row
  std::unordered_map<int64_t, void*> pointers = {
      {kQ, offset(qkv.data, 0, p.dtype)}, {kK, offset(qkv.data, k0, p.dtype)}, {kV, offset(qkv.data, v0, p.dtype)},
      {kO, out.data},                     {kStats, lse}};
  impl_->execute(p, pointers);
}

void CudnnAttention::backward_input(View dqkv, ConstView dout, ConstView qkv, ConstView out, const float* lse, int b,
                                    int t, int nh, int nkv, int hd) {
  const Problem p{b, t, nh, nkv, hd, qkv.dtype, Direction::backward};
  check_problem(p, {{"dqkv", dqkv.data}, {"dout", dout.data}, {"qkv", qkv.data}, {"out", out.data}, {"lse", lse}},
                {dqkv.dtype, dout.dtype, qkv.dtype, out.dtype});
  if (b == 0) return;
  const int64_t k0 = int64_t(nh) * hd, v0 = int64_t(nh + nkv) * hd;  // where K and V start in a row
  std::unordered_map<int64_t, void*> pointers = {
      {kQ, offset(qkv.data, 0, p.dtype)},   {kK, offset(qkv.data, k0, p.dtype)},  {kV, offset(qkv.data, v0, p.dtype)},
      {kO, offset(out.data, 0, p.dtype)},   {kDO, offset(dout.data, 0, p.dtype)}, {kStats, const_cast<float*>(lse)},
      {kDQ, offset(dqkv.data, 0, p.dtype)}, {kDK, offset(dqkv.data, k0, p.dtype)}, {kDV, offset(dqkv.data, v0, p.dtype)}};
  impl_->execute(p, pointers);
}

}  // namespace pptrain::cuda

#else  // a build without cuDNN

namespace pptrain::cuda {

// Never constructed in this build; Impl is only named by the unique_ptr.
struct CudnnAttention::Impl {};

CudnnAttention::CudnnAttention(cudaStream_t, CachingAllocator&) {
#ifdef PPTRAIN_EMULATED
  fail("model.attention: cudnn: this binary was built without cuDNN (the emulated cuda backend has none; "
       "use model.attention: flash or naive here, or the real CUDA build, make CUDA=1, on a machine with "
       "cuDNN 9 and its frontend headers from scripts/install_deps.sh)");
#else
  fail("model.attention: cudnn: this binary was built without cuDNN (rebuild with make CUDA=1 CUDNN=1 where "
       "cuDNN 9 is installed, NVIDIA's cudnn9-cuda-<CUDA major> package, after scripts/install_deps.sh fetched its "
       "frontend headers; or use model.attention: flash or naive)");
#endif
}
CudnnAttention::~CudnnAttention() = default;
size_t CudnnAttention::graphs() const { return 0; }
void CudnnAttention::forward(View, float*, ConstView, int, int, int, int, int) {
  fail("flash_attention_forward (model.attention: cudnn): this binary was built without cuDNN");
}
void CudnnAttention::backward_input(View, ConstView, ConstView, ConstView, const float*, int, int, int, int, int) {
  fail("flash_attention_backward_input (model.attention: cudnn): this binary was built without cuDNN");
}

}  // namespace pptrain::cuda

#endif

namespace pptrain {

// cuda_backend.h: the default model.attention on cuda depends on it (core/config.h).
bool cuda_backend_has_cudnn() {
#ifdef PPTRAIN_WITH_CUDNN
  return true;
#else
  return false;
#endif
}

}  // namespace pptrain
