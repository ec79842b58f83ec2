#include "trimkv/core/weight_cache.h"

#include <ATen/ops/empty.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fnv1a.h"
#include "trimkv/core/error.h"
#include "trimkv/core/file_fingerprint.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/weight_store.h"

namespace fs = std::filesystem;

namespace trimkv {

namespace {

constexpr const char* kCacheFormat = "trimkv-weight-cache";

// [name, bytes, mtime_ns, sample hash] of one file of the checkpoint (see the header).
nlohmann::json file_fingerprint(const std::string& path) {
  struct stat st {};
  TRIMKV_CHECK(::stat(path.c_str(), &st) == 0, Io, "cannot stat '", path, "': ", std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return nlohmann::json::array({fs::path(path).filename().string(), size, mtime_ns, file_sample_hash(path)});
}

}  // namespace

std::string weight_cache_dir() {
  if (const char* off = std::getenv("TRIMKV_WEIGHT_CACHE"); off && std::string(off) == "0") return "";
  if (const char* d = std::getenv("TRIMKV_WEIGHT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "trimkv" / "weights").string();
  const char* home = std::getenv("HOME");
  return home && *home ? (fs::path(home) / ".cache" / "trimkv" / "weights").string() : "";
}

std::shared_ptr<WeightCache> attach_weight_cache(WeightStore& store, kernels::WeightFormat format, bool enabled) {
  if (!enabled || !kernels::is_quantized(format)) return nullptr;
  const std::string dir = weight_cache_dir();
  if (dir.empty()) return nullptr;
  auto cache = std::make_shared<WeightCache>(store.source(), store.files(), format, dir, store.names());
  store.set_weight_cache(cache);
  return cache;
}

WeightCache::WeightCache(const std::string& source, const std::vector<std::string>& files,
                         kernels::WeightFormat format, const std::string& dir, const std::vector<std::string>& names)
    : m_format(format) {
  TRIMKV_ASSERT(kernels::is_quantized(format));
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(source), ec);
  const std::string abs_source = ec ? source : abs.string();
  std::string stem = fs::path(abs_source).filename().string();
  if (stem.empty()) stem = "model";
  m_path = (fs::path(dir) / (stem + "-" + hex64(fnv1a(abs_source)) + "." +
                             kernels::weight_format_name(format) + ".safetensors"))
               .string();
  m_tmp_path = m_path + ".tmp-" + std::to_string(::getpid());
  nlohmann::json fingerprints = nlohmann::json::array();
  for (const std::string& f : files) fingerprints.push_back(file_fingerprint(f));
  m_metadata = {{"format", kCacheFormat},
                {"layout", std::to_string(kWeightCacheLayout)},
                {"weights", kernels::weight_format_name(format)},
                {"source", abs_source},
                {"source_files", fingerprints.dump()}};
  // Room for the header: the metadata, escaped, and an entry per tensor of the checkpoint (its
  // name, dtype, a 3-long shape and two 20-digit offsets fit in name + 128 bytes).
  m_header_room = 1024 + nlohmann::json(m_metadata).dump().size();
  for (const std::string& n : names) m_header_room += nlohmann::json(n).dump().size() + 128;
  m_header_room = (m_header_room + 7) / 8 * 8;
  // New files left behind by loads that were killed (<file>.tmp-<pid> of a process that is gone).
  const std::string tmp_prefix = fs::path(m_path).filename().string() + ".tmp-";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(tmp_prefix, 0) != 0) continue;
    const long pid = std::strtol(n.c_str() + tmp_prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
  if (!fs::exists(m_path, ec)) return;
  std::shared_ptr<SafetensorsFile> file;
  try {
    file = std::make_shared<SafetensorsFile>(m_path);
  } catch (const Error& e) {
    m_refused = e.what();
    return;
  }
  const auto& md = file->metadata();
  auto said = [&](const std::string& key) {
    const auto it = md.find(key);
    return it == md.end() ? std::string("(none)") : it->second;
  };
  if (said("format") != kCacheFormat)
    m_refused = "not a trimkv weight cache (format " + said("format") + ")";
  else if (said("layout") != m_metadata["layout"])
    m_refused = "layout " + said("layout") + "; this build reads layout " + m_metadata["layout"];
  else if (said("weights") != m_metadata["weights"])
    m_refused = "holds " + said("weights") + " blocks, not " + m_metadata["weights"];
  else if (said("source") != abs_source)
    m_refused = "made from '" + said("source") + "', not from this checkpoint";
  else if (said("source_files") != m_metadata["source_files"])
    m_refused = "the checkpoint's files changed since it was written";
  if (m_refused.empty()) m_file = std::move(file);
}

WeightCache::~WeightCache() {
  if (m_out) {  // a load that failed half way: no half-written file stays behind
    m_out.reset();
    std::error_code ec;
    fs::remove(m_tmp_path, ec);
  }
}

at::Tensor WeightCache::take(const std::string& name, int64_t out, int64_t in) {
  if (!m_file) return {};
  const auto it = m_file->tensors().find(name);
  const std::vector<int64_t> shape = {out, in / kernels::kQuantBlock, kernels::quant_block_bytes(m_format)};
  if (it == m_file->tensors().end() || it->second.dtype != DType::U8 || it->second.shape != shape) return {};
  at::Tensor held = at::empty(shape, at::kByte);
  std::memcpy(held.data_ptr(), it->second.data, it->second.n_bytes);
  m_file->release(it->second);
  m_entries[name] = Entry{shape, false, 0, it->second.n_bytes};  // copied to a new file only if one is written
  ++m_hits;
  return held;
}

void WeightCache::keep(const std::string& name, const at::Tensor& held) {
  if (!m_write_error.empty()) return;
  const at::Tensor c = held.contiguous();
  const uint64_t n = static_cast<uint64_t>(kernels::weight_bytes(c));
  try {
    if (!m_out) {
      std::error_code ec;
      fs::create_directories(fs::path(m_path).parent_path(), ec);
      TRIMKV_CHECK(!ec, Io, "cannot create '", fs::path(m_path).parent_path().string(), "': ", ec.message());
      m_out = std::make_unique<std::ofstream>(m_tmp_path, std::ios::binary | std::ios::trunc);
      TRIMKV_CHECK(m_out->good(), Io, "cannot write '", m_tmp_path, "'");
      m_out->seekp(static_cast<std::streamoff>(8 + m_header_room));
    }
    m_out->write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(n));
    TRIMKV_CHECK(m_out->good(), Io, "write to '", m_tmp_path, "' failed (disk full?)");
  } catch (const Error& e) {
    m_write_error = e.what();
    return;
  }
  m_entries[name] = Entry{c.sizes().vec(), true, m_written, n};
  m_written += n;
}

std::string WeightCache::finish() {
  const std::string fmt = kernels::weight_format_name(m_format);
  const std::string refused = m_refused.empty() ? "" : "cache file '" + m_path + "' refused (" + m_refused + "); ";
  if (m_entries.empty() && m_write_error.empty()) return "";
  if (m_written == 0 && m_write_error.empty())
    return "matrices read as " + fmt + " blocks from the weight cache '" + m_path + "'";
  std::string failure = m_write_error;
  if (failure.empty()) {
    try {
      // Matrices read from the old file go after the new ones; then the header, in its room.
      for (auto& [name, e] : m_entries) {
        if (e.written) continue;
        const TensorInfo& t = m_file->tensors().at(name);
        m_out->write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(t.n_bytes));
        m_file->release(t);
        e = Entry{e.shape, true, m_written, e.n_bytes};
        m_written += e.n_bytes;
      }
      nlohmann::json header = nlohmann::json::object();
      header["__metadata__"] = m_metadata;
      for (const auto& [name, e] : m_entries)
        header[name] = {{"dtype", "U8"}, {"shape", e.shape}, {"data_offsets", {e.offset, e.offset + e.n_bytes}}};
      std::string h = header.dump();
      TRIMKV_ASSERT(h.size() <= m_header_room, "weight cache header of ", h.size(), " bytes, room for ", m_header_room);
      h.resize(m_header_room, ' ');  // JSON followed by spaces, as safetensors pads its headers
      const uint64_t hlen = h.size();
      m_out->seekp(0);
      m_out->write(reinterpret_cast<const char*>(&hlen), 8);
      m_out->write(h.data(), static_cast<std::streamsize>(h.size()));
      m_out->close();
      TRIMKV_CHECK(m_out->good(), Io, "write to '", m_tmp_path, "' failed (disk full?)");
      m_out.reset();
      m_file.reset();  // unmapped before the rename replaces it
      std::error_code ec;
      fs::rename(m_tmp_path, m_path, ec);
      TRIMKV_CHECK(!ec, Io, "cannot move '", m_tmp_path, "' to '", m_path, "': ", ec.message());
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  if (m_out || !failure.empty()) {
    m_out.reset();
    std::error_code ec;
    fs::remove(m_tmp_path, ec);
  }
  if (!failure.empty())
    return refused + "the " + fmt + " blocks quantised at load could not be cached: " + failure;
  std::error_code ec;
  const double mib = static_cast<double>(fs::file_size(m_path, ec)) / (1024.0 * 1024.0);
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MiB", ec ? 0.0 : mib);
  return refused + "matrices quantised to " + fmt + " at load" + (m_hits ? " (" + std::to_string(m_hits) + " read from the old cache)" : "") +
         "; blocks cached in '" + m_path + "' (" + size + ") for the next load";
}

}  // namespace trimkv
