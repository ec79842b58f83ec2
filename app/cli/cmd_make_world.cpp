// `trimkv make-world`: writes a split of the synthetic visual world (JSONL + PNGs).
#include <cstdlib>
#include <iostream>
#include <string>

#include "args.h"
#include "commands.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/world.h"

namespace trimkv::cli {
namespace {

uint64_t parse_seed(const std::string& v) {
  size_t used = 0;
  unsigned long long x = 0;
  try {
    if (v.empty() || v[0] == '-' || v[0] == '+') throw std::invalid_argument(v);
    x = std::stoull(v, &used);
  } catch (const std::exception&) {
    throw UsageError("option '--seed' needs a non-negative integer, got '" + v + "'");
  }
  if (used != v.size()) throw UsageError("option '--seed' needs a non-negative integer, got '" + v + "'");
  if (x > vision::world::kMaxSeed)
    throw UsageError("option '--seed' must be at most " + std::to_string(vision::world::kMaxSeed) + ", got " + v);
  return x;
}

}  // namespace

int cmd_make_world(int argc, char** argv, int first) {
  namespace w = vision::world;
  const std::vector<OptionSpec> specs = {
      {"out", "DIR", "output folder: DIR/{split}.jsonl, DIR/{split}.meta.json, DIR/images/{split}/*.png"},
      ranged_int("n", "N", "number of conversations", 1, 10000000),
      {"seed", "S", "seed (0.." + std::to_string(w::kMaxSeed) + "); each split derives its own stream"},
      {"split", "NAME", "train | val | test (default train)"},
      ranged_int("max-images", "K", "images per conversation: 1..K (default 8)", 1, w::kMaxImagesLimit),
      ranged_int("max-turns", "T", "user turns per conversation: 1..T (default 6)", 1, w::kMaxTurnsLimit),
      ranged_int("max-objects", "M", "objects per image: 1..M (default 6)", 1, w::kMaxObjectsLimit),
      ranged_int("min-objects", "K", "at least K objects per image (default 1; K <= M)", 1, w::kMaxObjectsLimit),
      {"image-size", "PX|MIN-MAX",
       "image side in pixels, one size or a range drawn per image (about log-uniformly; default 48-400, " +
           std::to_string(w::kMinImageSize) + ".." + std::to_string(w::kMaxImageSize) + ")"},
      {"quiet", "", "no progress on stderr"},
      {"help", "", "show this help"},
  };
  Args args("make-world", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("make-world",
                             "Write a split of the synthetic visual world: conversations of questions about "
                             "images of coloured shapes, as JSONL with PNG images and scene annotations.",
                             specs);
    return 0;
  }
  const std::string out = args.require("out");
  if (!args.has("n")) throw UsageError("option '--n' is required");
  const int n = args.get_int("n", 0);
  const uint64_t seed = parse_seed(args.require("seed"));
  w::Split split = w::Split::Train;
  try {
    split = w::parse_split(args.get("split", "train"));
  } catch (const Error& e) {
    throw UsageError(std::string("option '--split': ") + e.what());
  }
  w::WorldOptions options;
  if (args.has("image-size")) {
    const std::string v = args.get("image-size", "");
    const size_t dash = v.find('-');
    auto side = [&](const std::string& text) {
      char* end = nullptr;
      const long n = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || n < w::kMinImageSize || n > w::kMaxImageSize)
        throw UsageError("option '--image-size': '" + v + "' is not a side (or MIN-MAX) in " +
                         std::to_string(w::kMinImageSize) + ".." + std::to_string(w::kMaxImageSize));
      return static_cast<int>(n);
    };
    options.min_image_size = side(v.substr(0, dash));
    options.max_image_size = dash == std::string::npos ? options.min_image_size : side(v.substr(dash + 1));
    if (options.max_image_size < options.min_image_size)
      throw UsageError("option '--image-size': '" + v + "': MIN is larger than MAX");
  }
  options.max_images = args.get_int("max-images", options.max_images);
  options.max_turns = args.get_int("max-turns", options.max_turns);
  options.max_objects = args.get_int("max-objects", options.max_objects);
  options.min_objects = args.get_int("min-objects", options.min_objects);

  const bool quiet = args.flag("quiet");
  int64_t last_percent = -1;
  w::WorldFiles files;
  try {
    files = w::write_world(out, split, seed, n, options, [&](int64_t done, int64_t total) {
      const int64_t percent = done * 100 / total;
      if (!quiet && percent != last_percent) {
        last_percent = percent;
        std::cerr << "\rmake-world: " << done << "/" << total << " conversations" << std::flush;
      }
    });
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Io) throw Error(ErrorKind::Io, std::string("--out: ") + e.what());
    throw;
  }
  if (!quiet) std::cerr << "\n";
  std::cout << "wrote " << files.jsonl << ": " << files.n_conversations << " conversations, " << files.n_images
            << " images, " << files.n_turns << " turns (split " << w::split_name(split) << ", seed " << seed
            << ")\n";
  return 0;
}

}  // namespace trimkv::cli
