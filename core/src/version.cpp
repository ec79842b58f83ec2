#include "trimkv/core/version.h"

#include "trimkv_version_generated.h"

namespace trimkv {

const char* version() { return TRIMKV_VERSION; }
const char* git_revision() { return TRIMKV_GIT_REVISION; }

std::string version_line(const std::string& program) {
  const std::string rev = git_revision();
  return program + " " + version() + (rev.empty() ? "" : " (git " + rev + ")");
}

}  // namespace trimkv
