// Idefics3ImageProcessorPil (transformers models/idefics3/image_processing_pil_idefics3.py) and
// Idefics3Processor's prompt expansion, for one image at a time.
#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "trimkv/core/error.h"
#include "processors/processor_settings.h"
#include "trimkv/vision/idefics3.h"

namespace trimkv::vision {

namespace {

using json = nlohmann::json;

constexpr int kMaxImageSize = 4096;  // MAX_IMAGE_SIZE of the reference: absolute cap

// _resize_output_size_rescale_to_max_len then _resize_output_size_scale_below_upper_bound
// (Python float arithmetic, int() truncation).
std::pair<int, int> longest_edge_size(int height, int width, int max_len) {
  const double aspect = static_cast<double>(width) / height;
  if (width >= height) {
    width = max_len;
    height = static_cast<int>(width / aspect);
    if (height % 2 != 0) ++height;
  } else {
    height = max_len;
    width = static_cast<int>(height * aspect);
    if (width % 2 != 0) ++width;
  }
  height = std::max(height, 1);
  width = std::max(width, 1);
  const double aspect2 = static_cast<double>(width) / height;
  if (width >= height && width > kMaxImageSize) {
    width = kMaxImageSize;
    height = static_cast<int>(width / aspect2);
  } else if (height > width && height > kMaxImageSize) {
    height = kMaxImageSize;
    width = static_cast<int>(height * aspect2);
  }
  return {std::max(height, 1), std::max(width, 1)};
}

// resize_for_vision_encoder: both sides up to multiples of the tile size.
std::pair<int, int> tile_multiple_size(int height, int width, int tile) {
  const double aspect = static_cast<double>(width) / height;
  if (width >= height) {
    width = static_cast<int>(std::ceil(static_cast<double>(width) / tile)) * tile;
    height = static_cast<int>(width / aspect);
    height = static_cast<int>(std::ceil(static_cast<double>(height) / tile)) * tile;
  } else {
    height = static_cast<int>(std::ceil(static_cast<double>(height) / tile)) * tile;
    width = static_cast<int>(height * aspect);
    width = static_cast<int>(std::ceil(static_cast<double>(width) / tile)) * tile;
  }
  return {height, width};
}

int size_field(const json& j, const char* key, const std::string& path, int fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  TRIMKV_CHECK(v.is_object() && v.contains("longest_edge") && v["longest_edge"].is_number_integer(),
               Config, "'", path, "': field '", key, "' must be {\"longest_edge\": N}, got ", v.dump());
  const int x = v["longest_edge"].get<int>();
  TRIMKV_CHECK(x > 0, Config, "'", path, "': ", key, ".longest_edge must be positive, got ", x);
  return x;
}

}  // namespace

Idefics3ProcessorConfig Idefics3ProcessorConfig::from_folder(const std::string& dir) {
  Idefics3ProcessorConfig c;
  std::string path;
  const json j = read_image_processor_settings(dir, path);
  if (j.is_null()) return c;
  try {
    c.do_resize = read_flag(j, "do_resize", c.do_resize);
    c.do_image_splitting = read_flag(j, "do_image_splitting", c.do_image_splitting);
    c.longest_edge = size_field(j, "size", path, c.longest_edge);
    c.tile_size = size_field(j, "max_image_size", path, c.tile_size);
  } catch (const json::exception& e) {
    TRIMKV_FAIL(Format, "'", path, "': malformed image processor settings: ", e.what());
  }
  read_resample(j, path, c.resample);
  read_pixel_scaling(j, path, c.scaling);
  return c;
}

Idefics3Grid idefics3_grid(int width, int height, const Idefics3ProcessorConfig& cfg) {
  TRIMKV_CHECK(width > 0 && height > 0, Input, "empty image");
  Idefics3Grid g;
  g.scaled_width = width;
  g.scaled_height = height;
  if (cfg.do_resize) std::tie(g.scaled_height, g.scaled_width) = longest_edge_size(height, width, cfg.longest_edge);
  const int tile = cfg.tile_size;
  if (cfg.do_image_splitting) {
    std::tie(g.resized_height, g.resized_width) = tile_multiple_size(g.scaled_height, g.scaled_width, tile);
    if (g.resized_height > tile || g.resized_width > tile) {
      g.rows = (g.resized_height - tile) / tile + 1;
      g.cols = (g.resized_width - tile) / tile + 1;
    }
  } else {
    g.resized_width = g.resized_height = tile;
  }
  g.n_tiles = g.rows * g.cols + 1;  // the tiles and the global image, or the one image
  if (g.rows == 0) g.n_tiles = 1;
  return g;
}

Idefics3Tiles idefics3_preprocess(const RgbImage& input, const Idefics3ProcessorConfig& cfg) {
  TRIMKV_CHECK(input.width > 0 && input.height > 0, Input, "empty image");
  const Idefics3Grid g = idefics3_grid(input.width, input.height, cfg);
  Idefics3Tiles t;
  t.width = input.width;
  t.height = input.height;
  t.rows = g.rows;
  t.cols = g.cols;
  RgbImage img = input;
  if (cfg.do_resize) img = resize(img, g.scaled_width, g.scaled_height, cfg.resample);
  const int tile = cfg.tile_size;
  std::vector<RgbImage> frames;
  img = resize(img, g.resized_width, g.resized_height, cfg.resample);
  if (g.rows > 0) {
    for (int r = 0; r < t.rows; ++r)
      for (int c = 0; c < t.cols; ++c) frames.push_back(crop(img, c * tile, r * tile, tile, tile));
    frames.push_back(resize(img, tile, tile, cfg.resample));
  } else {
    frames.push_back(img);
  }
  t.resized_width = img.width;
  t.resized_height = img.height;
  const int64_t n = static_cast<int64_t>(frames.size());
  t.pixels = at::empty({n, 3, tile, tile}, at::kFloat);
  float* out = t.pixels.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    // Without splitting an image that fits already is not resized (the processor pads it; the
    // tower then masks the padding) - not a case of this pipeline: frames are tile x tile.
    TRIMKV_ASSERT(frames[i].width == tile && frames[i].height == tile);
    scale_pixels_into(frames[i], cfg.scaling, out + i * 3 * tile * tile);
  }
  return t;
}

std::string idefics3_image_prompt(int rows, int cols, int image_seq_len) {
  const std::string fake = kIdefics3FakeImageToken, global = kIdefics3GlobalImageToken;
  std::string image_tokens;
  for (int i = 0; i < image_seq_len; ++i) image_tokens += "<image>";
  if (rows == 0 && cols == 0) return fake + global + image_tokens + fake;
  std::string s;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c)
      s += fake + "<row_" + std::to_string(r + 1) + "_col_" + std::to_string(c + 1) + ">" + image_tokens;
    s += "\n";
  }
  return s + "\n" + fake + global + image_tokens + fake;
}

std::vector<TokenInfo> idefics3_tag_tokens(const std::vector<int32_t>& ids, const Idefics3TokenIds& tok,
                                           const std::vector<std::pair<int, int>>& grids,
                                           int grid_side, int first_image_id) {
  const int seq = grid_side * grid_side;
  std::vector<TokenInfo> out(ids.size());
  auto row_col = [&](int32_t id, int& r, int& c) {
    for (size_t i = 0; i < tok.row_col.size(); ++i)
      for (size_t j = 0; j < tok.row_col[i].size(); ++j)
        if (tok.row_col[i][j] == id) {
          r = static_cast<int>(i);
          c = static_cast<int>(j);
          return true;
        }
    return false;
  };
  size_t next_image = 0;
  bool in_image = false, seen_global = false;
  int image = -1, tile = 0, k = 0, rows = 0, cols = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    TokenInfo& t = out[i];
    int r = 0, c = 0;
    if (id == tok.fake) {
      if (!in_image) {
        TRIMKV_ASSERT(next_image < grids.size(), "more images in the prompt than given");
        image = static_cast<int>(next_image++);
        rows = grids[image].first;
        cols = grids[image].second;
        in_image = true;
        seen_global = false;
        tile = 0;
        k = 0;
      } else if (seen_global) {
        TRIMKV_ASSERT(k == seq, "image ", image, ": ", k, " image tokens in its global tile, expected ", seq);
        in_image = false;
      }
      t.modality = Modality::Special;
      // A marker opening a tile belongs to that tile.
      if (in_image && i + 1 < ids.size()) {
        if (ids[i + 1] == tok.global) tile = rows * cols;
        else if (row_col(ids[i + 1], r, c)) tile = r * cols + c;
      }
    } else if (id == tok.global) {
      TRIMKV_ASSERT(in_image, "<global-img> outside an image");
      TRIMKV_ASSERT(tile == 0 || k == seq, "image ", image, ": tile ", tile, " has ", k, " image tokens");
      tile = rows * cols;
      k = 0;
      seen_global = true;
      t.modality = Modality::Special;
    } else if (in_image && row_col(id, r, c)) {
      TRIMKV_ASSERT(r < rows && c < cols, "tile marker row ", r + 1, " col ", c + 1, " outside a ",
                    rows, "x", cols, " grid");
      TRIMKV_ASSERT(k == 0 || k == seq, "image ", image, ": a tile has ", k, " image tokens");
      tile = r * cols + c;
      k = 0;
      t.modality = Modality::Special;
    } else if (id == tok.image) {
      TRIMKV_ASSERT(in_image && k < seq, "an <image> token outside an expanded image");
      t.modality = Modality::Image;
      t.patch_row = static_cast<int16_t>(k / grid_side);
      t.patch_col = static_cast<int16_t>(k % grid_side);
      ++k;
    } else {
      t.modality = in_image ? Modality::Special : Modality::Text;
    }
    if (in_image || t.modality != Modality::Text) {
      t.image_id = static_cast<int16_t>(first_image_id + image);
      t.tile = static_cast<int16_t>(tile);
    }
  }
  TRIMKV_ASSERT(!in_image && next_image == grids.size(), "the prompt holds ", next_image, " of ",
                grids.size(), " images");
  return out;
}

}  // namespace trimkv::vision
