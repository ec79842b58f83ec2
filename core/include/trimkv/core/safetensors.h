// Reader for the safetensors format (MODELS.md "Formats"): u64 little-endian header length,
// JSON header {name: {dtype, shape, data_offsets}} (+ "__metadata__"), then the data buffer.
// The file is memory-mapped; tensors are returned as views into the mapping (see WeightStore for
// conversion to float32). Every structural problem is reported as Error{Format} naming the file
// and, where it applies, the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trimkv {

// Q8_0, Q4_0, Q4_1: llama.cpp's block-quantised types, found only in GGUF files (gguf.h); their
// bytes are whole blocks of 32 values along the last dimension (dtype_size is 0 for them).
enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, Q8_0, Q4_0, Q4_1 };

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

// RAII read-only memory mapping of a whole file. Owns the mapping; movable, not copyable.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return m_data; }
  size_t size() const { return m_size; }
  const std::string& path() const { return m_path; }
  // Drops the resident pages wholly inside [p, p + n) (a range of this mapping) from the
  // process's memory: the bytes stay readable (paged in again from the file). Loading calls it
  // once a tensor is converted, so a checkpoint is not held twice (mapped and converted).
  void release(const uint8_t* p, size_t n) const;

 private:
  std::string m_path;
  const uint8_t* m_data = nullptr;
  size_t m_size = 0;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapping of `file`
  size_t n_bytes = 0;
  std::string file;               // path of the file that holds it (for error messages)
  // GGUF files of llama-architecture models hold the q and k projections with each head's rows
  // in interleaved rotary order (llama.cpp's converter permutes them): the number of heads to put
  // back in Hugging Face's half-split order on load, 0 when the rows are as they are.
  int64_t interleaved_rope_heads = 0;

  int64_t numel() const;
};

// One .safetensors file. Validates the header completely on open: header length within the
// file, JSON well formed, known dtypes, data_offsets inside the buffer, consistent with
// shape x dtype size, and no two tensors overlapping.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::map<std::string, TensorInfo>& tensors() const { return m_tensors; }
  const std::map<std::string, std::string>& metadata() const { return m_metadata; }
  const std::string& path() const { return m_file->path(); }
  // MappedFile::release of one of this file's tensors.
  void release(const TensorInfo& t) const { m_file->release(t.data, t.n_bytes); }

 private:
  std::shared_ptr<MappedFile> m_file;
  std::map<std::string, TensorInfo> m_tensors;
  std::map<std::string, std::string> m_metadata;
};

// Writes float32 / other tensors to a .safetensors file (used by the gate trainer, tests and
// tools). Each entry's bytes must match shape x dtype size.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
// The file is replaced atomically (atomic_write.h): a reader never sees half a file, and a failed
// write (a full disk) leaves the previous one. Error{Io} naming the file.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace trimkv
