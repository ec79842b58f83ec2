#include "trimkv/core/atomic_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "trimkv/core/error.h"

namespace trimkv {

void write_file_atomic(const std::string& path, std::string_view bytes) {
  // Beside the target (same file system, so rename() is atomic), unique per process.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIMKV_CHECK(fd >= 0, Io, "cannot write '", path, "': ", std::strerror(errno));
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    TRIMKV_FAIL(Io, "cannot write '", path, "' (", what, "): ", std::strerror(err), "; the previous file, if any, is unchanged");
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      fail("writing");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("flushing");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TRIMKV_FAIL(Io, "cannot write '", path, "' (closing): ", std::strerror(err), "; the previous file, if any, is unchanged");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TRIMKV_FAIL(Io, "cannot replace '", path, "': ", std::strerror(err), "; the previous file, if any, is unchanged");
  }
}

}  // namespace trimkv
