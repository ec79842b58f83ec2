// World files: {split}.jsonl, {split}.meta.json and the PNGs (stb_image_write from libstb, which
// exports the implementation; not compiled here).
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <stb_image_write.h>

#include "trimkv/core/error.h"
#include "world/world_internal.h"

namespace trimkv::vision::world {
namespace {

constexpr const char* kGenerator = "trimkv-world/2";

void write_png(const std::string& path, const Scene& scene) {
  const std::vector<uint8_t> rgb = render_scene(scene);
  const int size = scene.image_size;
  TRIMKV_CHECK(stbi_write_png(path.c_str(), size, size, 3, rgb.data(), size * 3) != 0, Io, path,
               ": cannot write the PNG");
}

}  // namespace

WorldFiles write_world(const std::string& out_dir, Split split, uint64_t seed, int64_t n,
                       const WorldOptions& options, const WorldProgress& progress) {
  namespace fs = std::filesystem;
  validate(options);
  TRIMKV_CHECK(n > 0, Input, "the number of conversations must be positive, got ", n);
  (void)split_seed(seed, split);  // checks the seed's range before anything is written

  const std::string split_dir = std::string("images/") + split_name(split);
  std::error_code ec;
  fs::create_directories(fs::path(out_dir) / split_dir, ec);
  TRIMKV_CHECK(!ec, Io, out_dir, ": cannot create the folder ", (fs::path(out_dir) / split_dir).string(),
               ": ", ec.message());

  WorldFiles files;
  files.jsonl = (fs::path(out_dir) / (std::string(split_name(split)) + ".jsonl")).string();
  files.meta = (fs::path(out_dir) / (std::string(split_name(split)) + ".meta.json")).string();
  std::ofstream out(files.jsonl, std::ios::binary | std::ios::trunc);
  TRIMKV_CHECK(out.good(), Io, files.jsonl, ": cannot open for writing");
  for (int64_t i = 0; i < n; ++i) {
    const Conversation conv = make_conversation(seed, split, i, options);
    std::vector<std::string> paths;
    char name[64];
    for (size_t k = 0; k < conv.scenes.size(); ++k) {
      std::snprintf(name, sizeof name, "/%06lld_%zu.png", static_cast<long long>(i), k + 1);
      paths.push_back(split_dir + name);
      write_png((fs::path(out_dir) / paths.back()).string(), conv.scenes[k]);
    }
    out << conversation_json(conv, paths) << '\n';
    ++files.n_conversations;
    files.n_images += static_cast<int64_t>(conv.scenes.size());
    files.n_turns += static_cast<int64_t>(conv.turns.size());
    if (progress) progress(i + 1, n);
  }
  out.close();
  TRIMKV_CHECK(!out.fail(), Io, files.jsonl, ": write error");

  nlohmann::ordered_json meta = {
      {"generator", kGenerator},
      {"split", split_name(split)},
      {"seed", seed},
      {"split_seed", split_seed(seed, split)},
      {"options",
       {{"min_image_size", options.min_image_size},
        {"max_image_size", options.max_image_size},
        {"max_images", options.max_images},
        {"max_turns", options.max_turns},
        {"max_objects", options.max_objects}}},
      {"conversations", files.n_conversations},
      {"images", files.n_images},
      {"turns", files.n_turns},
      {"question_types", question_types()},
  };
  if (options.min_objects != 1) meta["options"]["min_objects"] = options.min_objects;  // only when used
  std::ofstream meta_out(files.meta, std::ios::binary | std::ios::trunc);
  meta_out << meta.dump(2) << '\n';
  meta_out.close();
  TRIMKV_CHECK(!meta_out.fail(), Io, files.meta, ": cannot write");
  return files;
}

}  // namespace trimkv::vision::world
