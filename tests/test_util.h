// Helpers shared by the test suites: fixture paths, scratch folders, fixture readers.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace trimkv::test {

inline std::string data_dir() { return TRIMKV_TEST_DATA_DIR; }
inline std::string model_dir(const std::string& name) { return data_dir() + "/models/" + name; }

// A fresh, empty folder under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    std::random_device rd;
    m_path = std::filesystem::temp_directory_path() /
             ("trimkv-test-" + tag + "-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(m_path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  std::string path() const { return m_path.string(); }
  std::string file(const std::string& name) const { return (m_path / name).string(); }

 private:
  std::filesystem::path m_path;
};

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Where tests/oracle/smollm2_checkpoint.py puts the real SmolLM2-135M-Instruct (its safetensors
// conversion and the GGUF file it came from): $TRIMKV_SMOLLM2, else
// ~/.cache/trimkv/models/SmolLM2-135M-Instruct. Tests on it say "skipped" when it is absent.
inline std::string smollm2_dir() {
  if (const char* d = std::getenv("TRIMKV_SMOLLM2")) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/trimkv/models/SmolLM2-135M-Instruct";
}
inline std::string smollm2_gguf() { return smollm2_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

// Copies a fixture model folder into `dst` (so a test can damage the copy).
inline void copy_model(const std::string& name, const std::string& dst) {
  std::filesystem::copy(model_dir(name), dst,
                        std::filesystem::copy_options::recursive |
                            std::filesystem::copy_options::overwrite_existing);
}

}  // namespace trimkv::test
