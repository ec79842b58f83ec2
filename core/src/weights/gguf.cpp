#include "trimkv/core/gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "trimkv/core/error.h"

namespace trimkv {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
// Limits no real file comes near; a header beyond them is refused before anything is allocated.
constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKeys = 1u << 20;
constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kMaxNesting = 2;  // arrays of arrays at most

struct TypeLayout {
  GgmlType type;
  const char* name;
  int64_t block;     // values per block
  int64_t bytes;     // bytes per block
};
constexpr TypeLayout kLayouts[] = {
    {GgmlType::F32, "F32", 1, 4},        {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},    {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},    {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},    {GgmlType::Q8_1, "Q8_1", 32, 36},
    {GgmlType::Q2_K, "Q2_K", 256, 84},   {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", 256, 144},  {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210},  {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::I8, "I8", 1, 1},          {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},        {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},        {GgmlType::BF16, "BF16", 1, 2},
};

const TypeLayout* layout_of(uint32_t t) {
  for (const auto& l : kLayouts)
    if (static_cast<uint32_t>(l.type) == t) return &l;
  return nullptr;
}

const char* value_type_name(GgufType t) {
  static const char* kNames[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                 "bool",  "string", "array", "uint64", "int64",  "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

// A bounds-checked little-endian cursor over the mapped header.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path) : m_data(data), m_size(size), m_path(path) {}

  size_t pos() const { return m_pos; }
  size_t left() const { return m_size - m_pos; }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, m_data + m_pos, sizeof(T));
    m_pos += sizeof(T);
    return v;
  }

  std::string string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(m_data + m_pos), static_cast<size_t>(n));
    m_pos += static_cast<size_t>(n);
    return s;
  }

  void need(uint64_t n, const char* what) const {
    TRIMKV_CHECK(n <= left(), Format, "'", m_path, "': ", what, " needs ", n, " bytes at offset ", m_pos,
                 " but the file has ", left(), " left: truncated or not a GGUF file");
  }

 private:
  const uint8_t* m_data;
  size_t m_size;
  size_t m_pos = 0;
  const std::string& m_path;
};

size_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

GgufValue read_value(Reader& r, uint32_t raw_type, const std::string& key, const std::string& path, uint64_t depth) {
  TRIMKV_CHECK(raw_type <= static_cast<uint32_t>(GgufType::F64), Format, "'", path, "': metadata '", key,
               "' has unknown value type ", raw_type);
  GgufValue v;
  v.type = static_cast<GgufType>(raw_type);
  auto set_unsigned = [&](uint64_t x) {
    v.u = x;
    v.i = x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? static_cast<int64_t>(x) : -1;
    v.f = static_cast<double>(x);
  };
  auto set_signed = [&](int64_t x) {
    v.i = x;
    v.u = x >= 0 ? static_cast<uint64_t>(x) : 0;
    v.f = static_cast<double>(x);
  };
  const char* what = "a metadata value";
  switch (v.type) {
    case GgufType::U8: set_unsigned(r.read<uint8_t>(what)); break;
    case GgufType::I8: set_signed(r.read<int8_t>(what)); break;
    case GgufType::U16: set_unsigned(r.read<uint16_t>(what)); break;
    case GgufType::I16: set_signed(r.read<int16_t>(what)); break;
    case GgufType::U32: set_unsigned(r.read<uint32_t>(what)); break;
    case GgufType::I32: set_signed(r.read<int32_t>(what)); break;
    case GgufType::U64: set_unsigned(r.read<uint64_t>(what)); break;
    case GgufType::I64: set_signed(r.read<int64_t>(what)); break;
    case GgufType::F32: v.f = r.read<float>(what); break;
    case GgufType::F64: v.f = r.read<double>(what); break;
    case GgufType::BOOL: {
      const uint8_t b = r.read<uint8_t>(what);
      TRIMKV_CHECK(b <= 1, Format, "'", path, "': metadata '", key, "' is a bool holding ", int(b));
      v.u = b;
      break;
    }
    case GgufType::STRING: v.s = r.string("a metadata string"); break;
    case GgufType::ARRAY: {
      TRIMKV_CHECK(depth < kMaxNesting, Format, "'", path, "': metadata '", key, "' nests arrays too deeply");
      const uint32_t item = r.read<uint32_t>("an array's item type");
      const uint64_t n = r.read<uint64_t>("an array's length");
      TRIMKV_CHECK(item <= static_cast<uint32_t>(GgufType::F64), Format, "'", path, "': metadata '", key,
                   "' is an array of unknown value type ", item);
      v.item_type = static_cast<GgufType>(item);
      // The count must fit the bytes left, at the smallest size an item can take.
      TRIMKV_CHECK(n <= r.left() / min_value_bytes(v.item_type), Format, "'", path, "': metadata '", key,
                   "' claims ", n, " items of ", value_type_name(v.item_type), " but only ", r.left(),
                   " bytes are left");
      v.items.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.items.push_back(read_value(r, item, key, path, depth + 1));
      break;
    }
  }
  return v;
}

}  // namespace

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

bool GgufValue::is_number() const { return is_integer() || type == GgufType::F32 || type == GgufType::F64; }

const char* ggml_type_name(GgmlType t) {
  const TypeLayout* l = layout_of(static_cast<uint32_t>(t));
  return l ? l->name : "?";
}

GgufFile::GgufFile(const std::string& path) : m_file(std::make_shared<MappedFile>(path)) {
  Reader r(m_file->data(), m_file->size(), path);
  TRIMKV_CHECK(m_file->size() >= 24 && r.read<uint32_t>("the magic") == kMagic, Format, "'", path,
               "' is not a GGUF file (no GGUF magic)");
  m_version = r.read<uint32_t>("the version");
  TRIMKV_CHECK(m_version == 2 || m_version == 3, Unsupported, "'", path, "' is GGUF version ", m_version,
               " (versions 2 and 3 are supported)");
  const uint64_t n_tensors = r.read<uint64_t>("the tensor count");
  const uint64_t n_keys = r.read<uint64_t>("the metadata count");
  TRIMKV_CHECK(n_tensors <= kMaxTensors && n_keys <= kMaxKeys, Format, "'", path, "' claims ", n_tensors,
               " tensors and ", n_keys, " metadata keys: not a real model header");

  for (uint64_t k = 0; k < n_keys; ++k) {
    std::string key = r.string("a metadata key");
    const uint32_t type = r.read<uint32_t>("a metadata value type");
    GgufValue v = read_value(r, type, key, path, 0);
    TRIMKV_CHECK(m_metadata.emplace(key, std::move(v)).second, Format, "'", path, "': metadata key '", key,
                 "' appears twice");
  }

  uint64_t alignment = 32;
  if (const auto a = get_int("general.alignment")) {
    TRIMKV_CHECK(*a > 0 && *a <= (1 << 20) && (*a & (*a - 1)) == 0, Format, "'", path,
                 "': general.alignment ", *a, " is not a power of two");
    alignment = static_cast<uint64_t>(*a);
  }

  struct Pending {
    uint64_t offset;
    size_t index;
  };
  std::vector<Pending> placed;
  m_tensors.reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, r.left() / 24)));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = r.string("a tensor name");
    const uint32_t n_dims = r.read<uint32_t>("a tensor's dimension count");
    TRIMKV_CHECK(n_dims >= 1 && n_dims <= kMaxDims, Format, "'", path, "': tensor '", t.name, "' has ", n_dims,
                 " dimensions (1 to 4 allowed)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.read<uint64_t>("a tensor dimension");
      TRIMKV_CHECK(ne >= 1 && ne <= (1ull << 40) && numel <= (1ull << 48) / ne, Format, "'", path, "': tensor '",
                   t.name, "' has dimension ", d, " of ", ne, ": impossible size");
      numel *= ne;
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type = r.read<uint32_t>("a tensor type");
    const TypeLayout* layout = layout_of(type);
    TRIMKV_CHECK(layout, Unsupported, "'", path, "': tensor '", t.name, "' has unknown ggml type ", type);
    t.type = layout->type;
    TRIMKV_CHECK(t.ne[0] % layout->block == 0, Format, "'", path, "': tensor '", t.name, "' rows of ", t.ne[0],
                 " values are not whole ", layout->name, " blocks of ", layout->block);
    t.n_bytes = static_cast<size_t>(numel / layout->block * layout->bytes);
    const uint64_t offset = r.read<uint64_t>("a tensor offset");
    TRIMKV_CHECK(offset % alignment == 0, Format, "'", path, "': tensor '", t.name, "' offset ", offset,
                 " is not a multiple of the alignment ", alignment);
    TRIMKV_CHECK(m_tensor_index.emplace(t.name, m_tensors.size()).second, Format, "'", path, "': tensor '",
                 t.name, "' appears twice");
    placed.push_back({offset, m_tensors.size()});
    m_tensors.push_back(std::move(t));
  }

  const uint64_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
  TRIMKV_CHECK(data_start <= m_file->size(), Format, "'", path, "': the tensor data would start at byte ", data_start,
               " of a ", m_file->size(), "-byte file: truncated");
  const uint64_t data_size = m_file->size() - data_start;
  std::sort(placed.begin(), placed.end(), [](const Pending& a, const Pending& b) { return a.offset < b.offset; });
  uint64_t end_of_previous = 0;
  const GgufTensor* previous = nullptr;
  for (const Pending& p : placed) {
    GgufTensor& t = m_tensors[p.index];
    TRIMKV_CHECK(p.offset <= data_size && t.n_bytes <= data_size - p.offset, Format, "'", path, "': tensor '",
                 t.name, "' (", t.n_bytes, " bytes at data offset ", p.offset, ") runs past the end of the file (",
                 data_size, " data bytes): truncated or a lying header");
    TRIMKV_CHECK(p.offset >= end_of_previous, Format, "'", path, "': tensor '", t.name, "' overlaps tensor '",
                 previous ? previous->name : "", "'");
    t.data = m_file->data() + data_start + p.offset;
    end_of_previous = p.offset + t.n_bytes;
    previous = &t;
  }
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  const auto it = m_tensor_index.find(name);
  return it == m_tensor_index.end() ? nullptr : &m_tensors[it->second];
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = m_metadata.find(key);
  return it == m_metadata.end() ? nullptr : &it->second;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  TRIMKV_CHECK(v->type == GgufType::STRING, Format, "'", path(), "': metadata '", key, "' is a ",
               value_type_name(v->type), ", not a string");
  return v->s;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  TRIMKV_CHECK(v->is_integer() && (v->type != GgufType::U64 || v->i >= 0), Format, "'", path(), "': metadata '",
               key, "' is a ", value_type_name(v->type), ", not an integer in range");
  return v->i;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  TRIMKV_CHECK(v->is_number(), Format, "'", path(), "': metadata '", key, "' is a ", value_type_name(v->type),
               ", not a number");
  return v->f;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  TRIMKV_CHECK(v->type == GgufType::BOOL, Format, "'", path(), "': metadata '", key, "' is a ",
               value_type_name(v->type), ", not a bool");
  return v->u != 0;
}

const std::vector<GgufValue>* GgufFile::get_array(const std::string& key, GgufType item) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  const bool ok = v->type == GgufType::ARRAY &&
                  (v->item_type == item || (item == GgufType::I64 && v->items.empty()) ||
                   (item == GgufType::I64 && !v->items.empty() && v->items.front().is_integer()));
  TRIMKV_CHECK(ok, Format, "'", path(), "': metadata '", key, "' is not an array of ", value_type_name(item));
  return &v->items;
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), 4) && magic == kMagic;
}

}  // namespace trimkv
