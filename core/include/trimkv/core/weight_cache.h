// The weight cache: a quantised copy of a checkpoint's matrices kept between runs (issue 18).
//
// `--weights q8|q4` on a checkpoint stored in another format quantises every matrix at load (a
// float32 copy of each, then llama.cpp's blocks). The blocks are written once to a safetensors
// file of our own and read back as they are by later loads of the same checkpoint in the same
// format: no float32 copy, no quantisation.
//
// Where: <dir>/<checkpoint name>-<hex FNV-1a hash of its absolute path>.<q8|q4>.safetensors,
// with <dir> = $TRIMKV_WEIGHT_CACHE_DIR, else $XDG_CACHE_HOME/trimkv/weights, else
// ~/.cache/trimkv/weights. TRIMKV_WEIGHT_CACHE=0 (or ModelLoadOptions::weight_cache = false)
// turns it off. Deleting the folder is always safe.
//
// Layout (kWeightCacheLayout):
//   tensors       one per matrix quantised at load, under the checkpoint's own tensor name, dtype
//                 U8, shape [out, in / 32, 34 (q8_0) or 18 (q4_0)]: the blocks of
//                 kernels/weight_format.h, rows in Hugging Face order (a GGUF file's interleaved
//                 rotary rows already put back)
//   __metadata__  format = "trimkv-weight-cache", layout = "1", weights = "q8" | "q4",
//                 source = the checkpoint's absolute path,
//                 source_files = JSON [[file name, bytes, mtime in ns, sample hash], ...] for each
//                 file of the checkpoint (sample hash: FNV-1a 64 of its first 64 KiB and of 4 KiB
//                 at 16 evenly spaced places, in hex)
// A file that does not parse, was made by another layout, for another format, from another
// checkpoint, or from files that have changed since, is refused (the reason goes to the load's
// note) and rebuilt. A tensor missing from an accepted file, or of the wrong shape, is quantised
// afresh and the file rewritten. A cache that cannot be written (read-only folder, full disk) is
// named in the note; the model loads all the same.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trimkv/kernels/weight_format.h"

namespace trimkv {

class SafetensorsFile;
class WeightStore;

constexpr int kWeightCacheLayout = 1;

// The folder caches go to (see above), or "" when TRIMKV_WEIGHT_CACHE=0.
std::string weight_cache_dir();

class WeightCache {
 public:
  // The cache of checkpoint `source` (a folder or a file; `files` are the files that hold its
  // tensors) held in `format` (q8_0 or q4_0), under `dir`; `names` are the checkpoint's tensor
  // names (they bound the size of the file's header). Reads and checks an existing file; throws
  // nothing for a bad one (it is refused, see refused()).
  WeightCache(const std::string& source, const std::vector<std::string>& files, kernels::WeightFormat format,
              const std::string& dir, const std::vector<std::string>& names);
  ~WeightCache();
  WeightCache(const WeightCache&) = delete;
  WeightCache& operator=(const WeightCache&) = delete;

  // The cached blocks of matrix `name` [out, in] (an owned copy), or an undefined tensor when the
  // cache does not hold it as it should.
  at::Tensor take(const std::string& name, int64_t out, int64_t in);
  // Blocks quantised this run for matrix `name`: written straight into the new file (behind
  // room left for its header), not kept in memory.
  void keep(const std::string& name, const at::Tensor& held);
  // After the load: writes the file when anything was quantised this run, and returns what
  // happened, for the user ("" when the cache was not used at all).
  std::string finish();

  const std::string& path() const { return m_path; }
  // Why an existing file was refused ("" when it was accepted or absent).
  const std::string& refused() const { return m_refused; }

 private:
  struct Entry {
    std::vector<int64_t> shape;
    bool written = false;    // already in the new file (else still only in the accepted one)
    uint64_t offset = 0;     // in the new file's data buffer
    uint64_t n_bytes = 0;
  };
  std::string m_path, m_tmp_path;  // the cache file, the new one being written
  uint64_t m_header_room = 0;      // bytes left for the new file's header (8-byte length excluded)
  kernels::WeightFormat m_format;
  std::map<std::string, std::string> m_metadata;  // what a file for this checkpoint must say
  std::shared_ptr<SafetensorsFile> m_file;        // the accepted cache file
  std::string m_refused;
  std::map<std::string, Entry> m_entries;  // every matrix asked for this run
  std::unique_ptr<std::ofstream> m_out;  // the new file
  uint64_t m_written = 0;                // data bytes written to it
  std::string m_write_error;
  int m_hits = 0;
};

// A cache for `store` held in `format`, set on the store (WeightStore::set_weight_cache), or
// nullptr when `format` is not quantised, `enabled` is false or weight_cache_dir() is "".
std::shared_ptr<WeightCache> attach_weight_cache(WeightStore& store, kernels::WeightFormat format, bool enabled);

}  // namespace trimkv
