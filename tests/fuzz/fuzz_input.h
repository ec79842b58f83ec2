// Shared by the fuzz targets (tests/fuzz, README "Fuzzing"): the input as a file the parser
// opens (most loaders take a path: they mmap or stream it), and the rule every target checks.
// A parser may refuse its input only with trimkv::Error (the typed error the CLI and the Studio
// turn into a message naming the input); a crash, a sanitizer report, or any other exception
// escaping it is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "trimkv/core/error.h"

namespace trimkv::fuzz {

// `name` (a file name, its extension chosen by the target) in a folder of this process's own,
// holding `data`. The folder is under $TMPDIR (or /tmp) and reused between inputs.
inline std::string input_file(const uint8_t* data, size_t size, const std::string& name) {
  static const std::filesystem::path dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(t && *t ? t : "/tmp") / ("trimkv-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::string path = (dir / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// Runs `parse`; trimkv::Error is a refusal (fine), anything else escaping is a finding (abort, so
// libFuzzer saves the input).
template <typename F>
void expect_only_trimkv_errors(const char* target, F&& parse) {
  try {
    parse();
  } catch (const trimkv::Error&) {
    // refused by name: what a parser should do with bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: an exception other than trimkv::Error escaped: %s\n", target, e.what());
    std::abort();
  }
}

}  // namespace trimkv::fuzz
