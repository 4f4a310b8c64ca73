#include "checkpoint/tensor_table.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"

namespace pptrain {

const char* section_group(Section s) {
  switch (s) {
    case Section::Model: return "/model";
    case Section::OptimM: return "/optim/m";
    case Section::OptimV: return "/optim/v";
  }
  return "";
}

std::vector<int64_t> local_shape_of(const ShardedTensor& t) {
  if (t.global_shape.size() == 1) return {t.local_rows};
  return {t.local_rows, t.local_cols};
}

namespace {

// Chunks of at most 512 MiB: far below HDF5's 4 GiB limit, large enough that a shard
// of any realistic tensor is one chunk (one contiguous extent on disk).
constexpr int64_t kMaxChunkBytes = int64_t(512) << 20;

// A shard as exchanged between ranks: its global rectangles only.
struct Rect {
  int64_t row, col, rows, cols;
  bool operator==(const Rect&) const = default;
};

struct Description {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<Rect> rects;
};

class Writer {
 public:
  template <typename T> void put(const T& v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void put_string(const std::string& s) {
    put(uint32_t(s.size()));
    bytes_ += s;
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T> T get() {
    PPTRAIN_CHECK(pos_ + sizeof(T) <= bytes_.size(), "short tensor description");
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    uint32_t n = get<uint32_t>();
    PPTRAIN_CHECK(pos_ + n <= bytes_.size(), "short tensor description");
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

std::string serialize(const std::vector<ShardedTensor>& tensors) {
  Writer w;
  for (const ShardedTensor& t : tensors) {
    w.put_string(t.name);
    w.put(uint32_t(t.global_shape.size()));
    for (int64_t d : t.global_shape) w.put(d);
    w.put(uint32_t(t.slabs.size()));
    for (const Slab& s : t.slabs) w.put(Rect{s.global_row, s.global_col, s.rows, s.cols});
  }
  return w.take();
}

std::vector<Description> deserialize(const std::string& bytes) {
  std::vector<Description> out;
  Reader r(bytes);
  while (!r.done()) {
    Description d;
    d.name = r.get_string();
    d.shape.resize(r.get<uint32_t>());
    for (auto& x : d.shape) x = r.get<int64_t>();
    d.rects.resize(r.get<uint32_t>());
    for (auto& x : d.rects) x = r.get<Rect>();
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

std::vector<TableEntry> build_global_table(const std::vector<ShardedTensor>& mine, const IoGroup& io) {
  const std::vector<std::string> all = io.allgather(serialize(mine));
  struct Merged {
    std::vector<int64_t> shape;
    std::vector<std::vector<Rect>> writer_shards;  // distinct shards, in rank order of first holder
    bool mine_writes = false;
    size_t most_slabs = 1;  // over every rank's shard
  };
  std::map<std::string, Merged> merged;
  for (int rank = 0; rank < int(all.size()); ++rank) {
    for (Description& d : deserialize(all[rank])) {
      auto [it, fresh] = merged.try_emplace(d.name);
      Merged& m = it->second;
      if (fresh) m.shape = d.shape;
      PPTRAIN_CHECK(m.shape == d.shape, "ranks disagree on the shape of ", d.name);
      m.most_slabs = std::max(m.most_slabs, d.rects.size());
      if (d.rects.empty()) continue;
      if (std::find(m.writer_shards.begin(), m.writer_shards.end(), d.rects) != m.writer_shards.end()) continue;
      m.writer_shards.push_back(d.rects);
      if (rank == io.rank()) m.mine_writes = true;
    }
  }

  std::map<std::string, int> local_index;
  for (int i = 0; i < int(mine.size()); ++i) local_index[mine[i].name] = i;

  std::vector<TableEntry> table;
  for (auto& [name, m] : merged) {
    TableEntry e;
    e.name = name;
    e.shape = m.shape;
    e.writes = m.mine_writes;
    e.transfers = int(m.most_slabs);
    auto it = local_index.find(name);
    if (it != local_index.end()) e.local = it->second;

    const int64_t rows = m.shape[0], cols = m.shape.size() > 1 ? m.shape[1] : 1;
    int64_t chunk_rows = 1, chunk_cols = 1, covered = 0;
    for (const auto& shard : m.writer_shards)
      for (const Rect& r : shard) {
        chunk_rows = std::max(chunk_rows, r.rows);
        chunk_cols = std::max(chunk_cols, r.cols);
        covered += r.rows * r.cols;
      }
    PPTRAIN_CHECK(covered == rows * cols, "the ranks' shards of ", name, " cover ", covered, " of ",
                  rows * cols, " elements");
    const int64_t max_rows = std::max<int64_t>(1, kMaxChunkBytes / int64_t(sizeof(float)) / chunk_cols);
    chunk_rows = std::min(chunk_rows, max_rows);
    // Chunks only pay when the writers' rectangles lie on the chunk grid (tp and pp shards
    // do: equal parts). ZeRO-1 ranges cut tensors anywhere, e.g. 254 rows and 2 rows of a
    // 256-row tensor, where a 254-row chunk would allocate 508 rows: such a dataset is
    // stored contiguously (no size limit, any hyperslab writable collectively).
    auto on_grid = [](int64_t begin, int64_t size, int64_t chunk, int64_t extent) {
      return begin % chunk == 0 && ((begin + size) % chunk == 0 || begin + size == extent);
    };
    for (const auto& shard : m.writer_shards)
      for (const Rect& r : shard)
        if (!on_grid(r.row, r.rows, chunk_rows, rows) || !on_grid(r.col, r.cols, chunk_cols, cols)) {
          chunk_rows = rows;
          chunk_cols = cols;
        }
    e.chunk = m.shape.size() > 1 ? std::vector<int64_t>{chunk_rows, chunk_cols} : std::vector<int64_t>{chunk_rows};
    table.push_back(std::move(e));
  }
  return table;
}

}  // namespace pptrain
