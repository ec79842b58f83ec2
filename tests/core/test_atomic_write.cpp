// write_file_atomic: a failed save (a full disk, simulated by a file-size limit: RLIMIT_FSIZE
// makes write() fail with EFBIG as a full disk makes it fail with ENOSPC) leaves the previous
// file as it was and no temporary file behind, and says why, naming the file.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <string>

#include "test_util.h"
#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"
#include "trimkv/core/safetensors.h"

using namespace trimkv;
namespace fs = std::filesystem;

namespace {

// Lowers the file-size limit for its lifetime (SIGXFSZ ignored, so write() fails instead).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    m_old_handler = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &m_old);
    rlimit lim = m_old;
    lim.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &m_old);
    std::signal(SIGXFSZ, m_old_handler);
  }

 private:
  rlimit m_old{};
  void (*m_old_handler)(int) = nullptr;
};

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("write_file_atomic replaces a file, and a failed write leaves the previous one", "[io][bad-input]") {
  test::ScratchDir dir("atomic");
  const std::string path = dir.file("conversation.json");
  write_file_atomic(path, "first version\n");
  REQUIRE(test::read_bytes(path) == "first version\n");
  write_file_atomic(path, "second\n");
  REQUIRE(test::read_bytes(path) == "second\n");
  REQUIRE(files_in(dir.path()) == 1);

  const std::string big(64 * 1024, 'x');
  {
    FileSizeLimit limit(4096);
    try {
      write_file_atomic(path, big);
      FAIL("a write past the limit succeeded");
    } catch (const Error& e) {
      CAPTURE(e.what());
      REQUIRE(e.kind() == ErrorKind::Io);
      REQUIRE_THAT(e.what(), Catch::Contains(path) && Catch::Contains("File too large") &&
                                 Catch::Contains("previous file, if any, is unchanged"));
    }
  }
  REQUIRE(test::read_bytes(path) == "second\n");  // intact
  REQUIRE(files_in(dir.path()) == 1);             // no temporary file left

  // Safetensors files (gates, checkpoints, the demo model) go the same way.
  const std::string st = dir.file("gates.safetensors");
  TensorToWrite t{"w", DType::F32, {2}, std::vector<uint8_t>(8, 0)};
  write_safetensors(st, {t});
  const std::string before = test::read_bytes(st);
  t.shape = {4096};
  t.bytes.assign(4096 * 4, 1);
  {
    FileSizeLimit limit(4096);
    REQUIRE_THROWS_WITH(write_safetensors(st, {t}), Catch::Contains(st));
  }
  REQUIRE(test::read_bytes(st) == before);
  REQUIRE(files_in(dir.path()) == 2);

  // A folder that does not exist: the error names the path.
  REQUIRE_THROWS_WITH(write_file_atomic(dir.file("no/such/folder/x.json"), "x"),
                      Catch::Contains("no/such/folder/x.json") && Catch::Contains("No such file or directory"));
}
