// The program's version (CMake's project(VERSION), the one place it is set) and the git revision
// it was built from (empty when built outside a git checkout).
#pragma once
#include <string>

namespace trimkv {

const char* version();
const char* git_revision();
// "trimkv 0.1.0 (git 1a2b3c4d5e6f)", or "trimkv 0.1.0" without a revision; `program` first.
std::string version_line(const std::string& program);

}  // namespace trimkv
