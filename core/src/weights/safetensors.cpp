#include "trimkv/core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"
#include "trimkv/core/json_input.h"

namespace trimkv {

namespace {

struct DTypeEntry {
  const char* name;
  DType dtype;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {"F32", DType::F32, 4}, {"F16", DType::F16, 2}, {"BF16", DType::BF16, 2},
    {"F64", DType::F64, 8}, {"I64", DType::I64, 8}, {"I32", DType::I32, 4},
    {"I16", DType::I16, 2}, {"I8", DType::I8, 1},   {"U8", DType::U8, 1},
    {"BOOL", DType::BOOL, 1},
};

// A header larger than this is not a real checkpoint header (HF caps it at 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

}  // namespace

const char* dtype_name(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.name;
  switch (dtype) {
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    default: return "?";
  }
}

size_t dtype_size(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.size;
  return 0;
}

MappedFile::MappedFile(const std::string& path) : m_path(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  TRIMKV_CHECK(fd >= 0, Io, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TRIMKV_FAIL(Io, "'", path, "' is not a regular file");
  }
  m_size = static_cast<size_t>(st.st_size);
  if (m_size > 0) {
    void* p = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      TRIMKV_FAIL(Io, "cannot map '", path, "': ", std::strerror(err));
    }
    m_data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

void MappedFile::release(const uint8_t* p, size_t n) const {
  TRIMKV_ASSERT(p >= m_data && p + n <= m_data + m_size);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  // A read-only private file mapping: MADV_DONTNEED only forgets the pages (advice; its result
  // does not matter for correctness).
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (m_data) ::munmap(const_cast<uint8_t*>(m_data), m_size);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : m_file(std::make_shared<MappedFile>(path)) {
  const size_t file_size = m_file->size();
  TRIMKV_CHECK(file_size >= 8, Format, "'", path, "' is not a safetensors file: ", file_size,
               " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, m_file->data(), 8);  // little-endian on every supported host
  TRIMKV_CHECK(header_len <= file_size - 8, Format, "'", path, "': header length ", header_len,
               " exceeds the file (", file_size, " bytes): truncated or not a safetensors file");
  TRIMKV_CHECK(header_len <= kMaxHeaderBytes, Format, "'", path, "': header length ", header_len,
               " bytes is over the format's limit of ", kMaxHeaderBytes, " bytes (100 MiB)");
  const char* hbegin = reinterpret_cast<const char*>(m_file->data() + 8);
  // Strict: a header naming one tensor twice is refused (a lenient reader keeps either).
  const nlohmann::json header =
      parse_json_input(std::string(hbegin, hbegin + header_len), "'" + path + "' (JSON header)");
  TRIMKV_CHECK(header.is_object(), Format, "'", path, "': header is not a JSON object");

  const uint8_t* buffer = m_file->data() + 8 + header_len;
  const size_t buffer_size = file_size - 8 - header_len;
  std::vector<std::pair<size_t, size_t>> ranges;  // [begin, end) per tensor, for overlap check
  std::vector<std::string> range_names;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      TRIMKV_CHECK(v.is_object(), Format, "'", path, "': __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        TRIMKV_CHECK(m.value().is_string(), Format, "'", path, "': __metadata__ value '",
                     m.key(), "' is not a string");
        m_metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    TRIMKV_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") &&
                     v.contains("data_offsets"),
                 Format, "'", path, "': tensor '", name,
                 "' lacks dtype, shape or data_offsets");
    TRIMKV_CHECK(v["dtype"].is_string(), Format, "'", path, "': tensor '", name,
                 "' has a non-string dtype");
    TensorInfo info;
    info.name = name;
    info.file = path;
    const std::string dt = v["dtype"].get<std::string>();
    bool known = false;
    for (const auto& e : kDTypes)
      if (dt == e.name) {
        info.dtype = e.dtype;
        known = true;
      }
    TRIMKV_CHECK(known, Format, "'", path, "': tensor '", name, "' has unknown dtype '", dt, "'");
    TRIMKV_CHECK(v["shape"].is_array(), Format, "'", path, "': tensor '", name,
                 "' has a non-array shape");
    for (const auto& d : v["shape"]) {
      TRIMKV_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, Format, "'", path,
                   "': tensor '", name, "' has an invalid dimension ", d.dump());
      info.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    TRIMKV_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                     off[1].is_number_unsigned(),
                 Format, "'", path, "': tensor '", name, "' has malformed data_offsets");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    TRIMKV_CHECK(begin <= end && end <= buffer_size, Format, "'", path, "': tensor '", name,
                 "' data_offsets [", begin, ", ", end, ") lie outside the data buffer of ",
                 buffer_size, " bytes (truncated file?)");
    const uint64_t expected = static_cast<uint64_t>(info.numel()) * dtype_size(info.dtype);
    TRIMKV_CHECK(end - begin == expected, Format, "'", path, "': tensor '", name, "' holds ",
                 end - begin, " bytes but its shape and dtype need ", expected);
    info.data = buffer + begin;
    info.n_bytes = end - begin;
    ranges.emplace_back(begin, end);
    range_names.push_back(name);
    m_tensors.emplace(name, std::move(info));
  }

  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& prev = ranges[order[i - 1]];
    const auto& cur = ranges[order[i]];
    TRIMKV_CHECK(cur.first >= prev.second || cur.first == cur.second || prev.first == prev.second,
                 Format, "'", path, "': tensors '", range_names[order[i - 1]], "' and '",
                 range_names[order[i]], "' overlap in the data buffer");
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    TRIMKV_CHECK(static_cast<uint64_t>(numel) * dtype_size(t.dtype) == t.bytes.size(), Shape,
                 "write_safetensors('", path, "'): tensor '", t.name, "' has ", t.bytes.size(),
                 " bytes, its shape needs ", numel * dtype_size(t.dtype));
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // align the data buffer like the reference writer
  const uint64_t hlen = h.size();
  std::string bytes;
  bytes.reserve(8 + h.size() + offset);
  bytes.append(reinterpret_cast<const char*>(&hlen), 8);
  bytes += h;
  for (const auto& t : tensors) bytes.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  write_file_atomic(path, bytes);
}

}  // namespace trimkv
