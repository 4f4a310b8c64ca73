#include "checkpoint/llmc_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/input_file.h"

namespace pptrain {
namespace {

constexpr int kHeaderInts = 256;
constexpr uint64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);  // 1024
constexpr int kMagic = 20240326;

// An open file descriptor (RAII).
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

float bf16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;  // bf16 is the top half of an fp32
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Reads bytes [offset, offset + n) of `fd` into `out`; a short read (the file shrank
// since its size was checked) is one line naming the file and offset.
void read_exactly(int fd, void* out, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<unsigned char*>(out);
  uint64_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd, p + done, size_t(std::min<uint64_t>(n - done, 1u << 30)), off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, ": read failed at byte ", offset + done, " (", std::strerror(errno), ")");
    if (got == 0) fail(path, ": file ends at byte ", offset + done, " (expected ", offset + n, " bytes; it shrank while being read)");
    done += uint64_t(got);
  }
}

// One of the 16 llm.c tensors: the shape of one layer's slice (L-stacked ones marked).
struct Part {
  const char* name;
  int64_t rows, cols;
  bool per_layer;
};

// The header's tensors in file order. Rows such as 4·C are formed in 64 bits from int32
// header fields, so they cannot overflow; their products are checked where they are used.
std::vector<Part> parts_of(int64_t T, int64_t C, int64_t Vp) {
  return {{"wte.weight", Vp, C, false},         {"wpe.weight", T, C, false},
          {"ln_1.weight", C, 1, true},          {"ln_1.bias", C, 1, true},
          {"attn.qkv.weight", 3 * C, C, true},  {"attn.qkv.bias", 3 * C, 1, true},
          {"attn.proj.weight", C, C, true},     {"attn.proj.bias", C, 1, true},
          {"ln_2.weight", C, 1, true},          {"ln_2.bias", C, 1, true},
          {"mlp.fc.weight", 4 * C, C, true},    {"mlp.fc.bias", 4 * C, 1, true},
          {"mlp.proj.weight", C, 4 * C, true},  {"mlp.proj.bias", C, 1, true},
          {"ln_f.weight", C, 1, false},         {"ln_f.bias", C, 1, false}};
}

// Elements of all tensors, in overflow-checked arithmetic: a hostile header whose sizes
// wrap 64 bits around to the real file size must not pass the size check.
uint64_t total_elements(const std::vector<Part>& parts, int64_t L, const std::string& path) {
  uint64_t total = 0;
  for (const Part& p : parts) {
    auto n = checked_product({p.rows, p.cols, p.per_layer ? L : 1});
    auto sum = n ? checked_add(total, *n) : std::nullopt;
    if (!sum) fail(path, ": the header's tensor sizes overflow 64-bit arithmetic at ", p.name, " (not an llm.c model file)");
    total = *sum;
  }
  return total;
}

}  // namespace

LlmcModel read_llmc_model(const std::string& path) {
  require_regular_file(path, "llm.c model file");
  // O_NONBLOCK: a FIFO swapped in after the check opens at once; fstat then refuses it.
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) fail(path, ": cannot open llm.c model file (", std::strerror(errno), ")");
  struct stat info;
  if (::fstat(file.fd, &info) != 0 || !S_ISREG(info.st_mode)) fail(path, ": not a regular file (expected an llm.c model file)");
  const uint64_t size = uint64_t(info.st_size);  // of the file opened, whatever the path names now
  if (size < kHeaderBytes) fail(path, ": ", size, " bytes, shorter than the 1024-byte llm.c header");
  int32_t header[kHeaderInts];
  read_exactly(file.fd, header, kHeaderBytes, 0, path);
  if (header[0] != kMagic) fail(path, ": bad magic ", header[0], " (expected ", kMagic, ", an llm.c GPT-2 model file)");
  LlmcModel m;
  m.version = header[1];
  if (m.version != 3 && m.version != 5)
    fail(path, ": llm.c model version ", m.version, " is not supported (expected 3, fp32, or 5, bf16)");
  const int64_t T = header[2], V = header[3], L = header[4], NH = header[5], C = header[6], Vp = header[7];
  if (T < 1 || V < 2 || L < 1 || NH < 1 || C < 1 || C % NH != 0 || Vp < V)
    fail(path, ": implausible llm.c header (maxT ", T, ", V ", V, ", L ", L, ", NH ", NH, ", C ", C, ", Vp ", Vp, ")");
  m.model.n_layer = int(L);
  m.model.n_head = int(NH);
  m.model.d_model = int(C);
  m.model.seq_len = int(T);
  m.model.vocab_size = int(V);
  m.padded_vocab = int(Vp);

  const std::vector<Part> parts = parts_of(T, C, Vp);
  const uint64_t total = total_elements(parts, L, path);
  const uint64_t elem = m.version == 3 ? 4 : 2;
  auto payload = checked_mul(total, elem);
  auto expected = payload ? checked_add(kHeaderBytes, *payload) : std::nullopt;
  if (!expected) fail(path, ": the header's tensor sizes overflow 64-bit arithmetic (not an llm.c model file)");
  // Compared before anything is allocated: the allocation below is bounded by the file.
  if (size != *expected)
    fail(path, ": ", size, " bytes, but the header (", L, " layers, C ", C, ", Vp ", Vp, ", maxT ", T,
         ", version ", m.version, ") needs ", *expected, " bytes (truncated or not an llm.c model file)");

  std::vector<float> all(total);  // every tensor, in file order
  if (m.version == 3) {
    read_exactly(file.fd, all.data(), *payload, kHeaderBytes, path);
  } else {
    std::vector<uint16_t> raw(total);
    read_exactly(file.fd, raw.data(), *payload, kHeaderBytes, path);
    for (uint64_t i = 0; i < total; ++i) all[i] = bf16_to_float(raw[i]);
  }

  // Cut the stream into pptrain tensors; per-layer tensors are [L, ...] stacks. Every
  // size below is at most `total`, checked above.
  const float* p = all.data();
  auto take = [&](const std::string& name, int64_t rows, int64_t cols, int64_t keep_rows) {
    NamedTensor t;
    t.name = name;
    t.shape = cols == 1 ? std::vector<int64_t>{keep_rows} : std::vector<int64_t>{keep_rows, cols};
    t.values.assign(p, p + keep_rows * cols);
    p += rows * cols;
    return t;
  };
  for (const Part& part : parts) {
    if (!part.per_layer) {
      // wte keeps its first V rows: the padding rows Vp - V are not part of the model.
      const int64_t keep = std::string(part.name) == "wte.weight" ? V : part.rows;
      m.tensors.push_back(take(part.name, part.rows, part.cols, keep));
      continue;
    }
    for (int64_t l = 0; l < L; ++l) m.tensors.push_back(take(cat("h.", l, ".", part.name), part.rows, part.cols, part.rows));
  }
  PPTRAIN_CHECK(p == all.data() + total);
  return m;
}

}  // namespace pptrain
