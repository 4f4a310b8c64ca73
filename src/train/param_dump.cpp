#include "train/param_dump.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace pptrain {
namespace {

constexpr char kMagic[8] = {'P', 'P', 'D', 'U', 'M', 'P', '1', '\n'};

struct File {
  FILE* f;
  std::string path;
  ~File() { if (f) std::fclose(f); }
  void put(const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f) != n) fail(path, ": write failed: ", std::strerror(errno));
  }
  void get(void* p, size_t n) {
    if (std::fread(p, 1, n, f) != n) fail(path, ": truncated dump");
  }
  template <typename T> void put(const T& v) { put(&v, sizeof v); }
  template <typename T> T get() { T v; get(&v, sizeof v); return v; }
};

}  // namespace

void write_param_dump(const std::string& path, double loss, ParamStore& params, Buffer<float>* gathered_masters) {
  PPTRAIN_CHECK(params.masters_sharded() == (gathered_masters != nullptr) &&
                    (!gathered_masters || gathered_masters->size() == params.flat_layout().total()),
                "write_param_dump: sharded masters need the gathered masters arena, and only they");
  File out{std::fopen(path.c_str(), "wb"), path};
  if (!out.f) fail(path, ": cannot create dump file");
  out.put(kMagic, 8);
  out.put(loss);
  out.put(uint32_t(params.all().size()));
  for (auto& [name, p] : params.all()) {
    out.put(uint32_t(name.size()));
    out.put(name.data(), name.size());
    out.put(uint32_t(p->spec.global_shape.size()));
    for (int64_t d : p->spec.global_shape) out.put(d);
    out.put(p->local_cols);
    out.put(uint32_t(p->slabs.size()));
    for (const Slab& s : p->slabs) out.put(s);
    auto v = gathered_masters
                 ? Buffer<float>::view(params.ops(), gathered_masters->data() + p->flat_offset, p->numel()).to_host()
                 : p->value.to_host();
    auto g = p->grad.to_host();
    out.put(uint64_t(v.size()));
    out.put(v.data(), v.size() * sizeof(float));
    out.put(g.data(), g.size() * sizeof(float));
  }
  // Buffered writes fail at the flush (a full disk): checked, not lost in the destructor.
  FILE* f = out.f;
  out.f = nullptr;
  if (std::fclose(f) != 0) fail(path, ": write failed: ", std::strerror(errno));
}

GlobalDump read_param_dumps(const std::vector<std::string>& paths) {
  GlobalDump dump;
  bool have_loss = false;
  for (const auto& path : paths) {
    File in{std::fopen(path.c_str(), "rb"), path};
    if (!in.f) fail(path, ": cannot open dump file");
    char magic[8];
    in.get(magic, 8);
    if (std::memcmp(magic, kMagic, 8) != 0) fail(path, ": not a parameter dump");
    double loss = in.get<double>();
    if (!have_loss || loss != 0) dump.loss = loss;  // every rank writes the same mean loss
    have_loss = true;
    uint32_t count = in.get<uint32_t>();
    for (uint32_t i = 0; i < count; ++i) {
      std::string name(in.get<uint32_t>(), '\0');
      in.get(name.data(), name.size());
      std::vector<int64_t> shape(in.get<uint32_t>());
      for (auto& d : shape) d = in.get<int64_t>();
      int64_t local_cols = in.get<int64_t>();
      std::vector<Slab> slabs(in.get<uint32_t>());
      for (auto& s : slabs) s = in.get<Slab>();
      std::vector<float> v(in.get<uint64_t>()), g(v.size());
      in.get(v.data(), v.size() * sizeof(float));
      in.get(g.data(), g.size() * sizeof(float));
      GlobalTensor& t = dump.tensors[name];
      int64_t total = 1;
      for (int64_t d : shape) total *= d;
      if (t.shape.empty()) {
        t.shape = shape;
        t.value.assign(total, 0.0f);
        t.grad.assign(total, 0.0f);
        t.covered.assign(total, 0);
      } else if (t.shape != shape) {
        fail(path, ": tensor '", name, "' has a different shape than in another rank's dump");
      }
      const int64_t gcols = shape.size() > 1 ? shape[1] : 1;
      for (const Slab& s : slabs)
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t c = 0; c < s.cols; ++c) {
            int64_t gi = (s.global_row + r) * gcols + s.global_col + c;
            int64_t li = (s.local_row + r) * local_cols + s.local_col + c;
            if (t.covered[gi]) {
              dump.max_replica_diff = std::max<double>(
                  dump.max_replica_diff, std::fabs(t.value[gi] - v[li]) + std::fabs(t.grad[gi] - g[li]));
            }
            t.value[gi] = v[li];
            t.grad[gi] = g[li];
            t.covered[gi] = 1;
          }
    }
  }
  return dump;
}

}  // namespace pptrain
