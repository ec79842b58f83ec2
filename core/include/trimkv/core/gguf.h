// Reader for GGUF files (llama.cpp's single-file model format, versions 2 and 3; MODELS.md
// "Formats"): "GGUF", u32 version, u64 tensor count, u64 metadata count, the metadata as typed
// key/value pairs, the tensor infos (name, dims innermost first, ggml type, offset), then the
// tensor data, aligned to general.alignment (32 by default).
//
// The file is memory-mapped and its header validated completely on open: every count, length and
// offset is checked against the file before it is used (a header that lies is refused, never
// read past), tensor types must be known ggml types, sizes must be whole blocks, tensors lie
// inside the data section without overlapping, and names and keys are unique. Errors are
// Error{Format} naming the file and the key or tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trimkv/core/safetensors.h"

namespace trimkv {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12
};

// One metadata value. Numbers are kept as the widest type of their kind (integers also as
// double); arrays hold their items.
struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t u = 0;   // unsigned integers and bool
  int64_t i = 0;    // signed integers (and unsigned ones that fit)
  double f = 0.0;   // floats (and every integer)
  std::string s;    // STRING
  GgufType item_type = GgufType::U8;  // ARRAY
  std::vector<GgufValue> items;       // ARRAY

  bool is_integer() const;
  bool is_number() const;
};

// ggml tensor types this reader knows the block layout of (others are refused on open).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10,
  Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, I8 = 24, I16 = 25, I32 = 26, I64 = 27,
  F64 = 28, BF16 = 30
};
const char* ggml_type_name(GgmlType t);

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;     // dims as GGUF writes them: ne[0] is the innermost (row length)
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  // The shape in row-major order (torch's): ne reversed.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return m_file->path(); }
  uint32_t version() const { return m_version; }
  const std::map<std::string, GgufValue>& metadata() const { return m_metadata; }
  const std::vector<GgufTensor>& tensors() const { return m_tensors; }
  const GgufTensor* find_tensor(const std::string& name) const;
  const MappedFile& mapping() const { return *m_file; }

  // Typed metadata lookups: nullopt / null when the key is absent; Error{Format} naming the file
  // and key when it is present with another type.
  const GgufValue* find(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;  // any integer type
  std::optional<double> get_float(const std::string& key) const; // any number
  std::optional<bool> get_bool(const std::string& key) const;
  // An array whose items are `item` (or, for item == I64, any integer type); null when absent.
  const std::vector<GgufValue>* get_array(const std::string& key, GgufType item) const;

 private:
  std::shared_ptr<MappedFile> m_file;
  uint32_t m_version = 0;
  std::map<std::string, GgufValue> m_metadata;
  std::vector<GgufTensor> m_tensors;
  std::map<std::string, size_t> m_tensor_index;
};

// Whether `path` names a GGUF file: a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

}  // namespace trimkv
