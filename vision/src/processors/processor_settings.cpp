#include "processors/processor_settings.h"

#include <filesystem>
#include <fstream>

#include "trimkv/core/error.h"

namespace trimkv::vision {

using json = nlohmann::json;

json read_json_object(const std::string& path) {
  std::ifstream in(path);
  TRIMKV_CHECK(in.good(), Io, "cannot read '", path, "'");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    TRIMKV_FAIL(Format, "'", path, "': malformed JSON: ", e.what());
  }
  TRIMKV_CHECK(j.is_object(), Format, "'", path, "' is not a JSON object");
  return j;
}

const json& json_section(const json& j, const char* key) {
  static const json kEmpty = json::object();
  return j.contains(key) && j[key].is_object() ? j[key] : kEmpty;
}

int64_t read_positive_int(const json& j, const char* key, int64_t fallback, const std::string& path, const char* where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  TRIMKV_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, Config, "'", path, "': field '", where, key,
               "' must be a positive integer, got ", j[key].dump());
  return j[key].get<int64_t>();
}

json read_image_processor_settings(const std::string& dir, std::string& path) {
  namespace fs = std::filesystem;
  path = (fs::path(dir) / "preprocessor_config.json").string();
  try {
    if (fs::exists(path)) return read_json_object(path);
    path = (fs::path(dir) / "processor_config.json").string();
    if (!fs::exists(path)) return nullptr;
    std::ifstream in(path);
    const json p = json::parse(in);
    if (!p.is_object() || !p.contains("image_processor")) return nullptr;
    TRIMKV_CHECK(p["image_processor"].is_object(), Format, "'", path, "': the image processor settings are not an object");
    return p["image_processor"];
  } catch (const json::exception& e) {
    TRIMKV_FAIL(Format, "'", path, "': malformed JSON: ", e.what());
  }
}

bool read_flag(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

void read_resample(const json& j, const std::string& path, ResampleFilter& filter) {
  if (j.contains("resample") && !j["resample"].is_null()) {
    TRIMKV_CHECK(j["resample"].is_number_integer(), Config, "'", path, "': field 'resample' must be an integer");
    filter = resample_filter_from_pil(j["resample"].get<int>(), "'" + path + "'");
  }
}

void read_pixel_scaling(const json& j, const std::string& path, PixelScaling& s) {
  try {
    s.do_rescale = read_flag(j, "do_rescale", s.do_rescale);
    s.do_normalize = read_flag(j, "do_normalize", s.do_normalize);
    if (j.contains("rescale_factor") && !j["rescale_factor"].is_null()) s.rescale_factor = j["rescale_factor"].get<double>();
    for (const char* key : {"image_mean", "image_std"}) {
      if (!j.contains(key) || j[key].is_null()) continue;
      const json& v = j[key];
      float* dst = std::string(key) == "image_mean" ? s.mean : s.std;
      if (v.is_number()) {
        dst[0] = dst[1] = dst[2] = v.get<float>();
      } else {
        TRIMKV_CHECK(v.is_array() && v.size() == 3, Config, "'", path, "': field '", key,
                     "' must be a number or 3 numbers, got ", v.dump());
        for (int i = 0; i < 3; ++i) dst[i] = v[i].get<float>();
      }
    }
  } catch (const json::exception& e) {
    TRIMKV_FAIL(Format, "'", path, "': malformed image processor settings: ", e.what());
  }
  for (float x : s.std) TRIMKV_CHECK(x != 0.0f, Config, "'", path, "': image_std must not be 0");
}

void scale_pixels_into(const RgbImage& img, const PixelScaling& s, float* out) {
  const size_t plane = static_cast<size_t>(img.width) * img.height;
  for (int c = 0; c < 3; ++c)
    for (size_t i = 0; i < plane; ++i) {
      float v = s.do_rescale ? static_cast<float>(static_cast<double>(img.data[i * 3 + c]) * s.rescale_factor)
                             : static_cast<float>(img.data[i * 3 + c]);
      if (s.do_normalize) v = (v - s.mean[c]) / s.std[c];
      out[c * plane + i] = v;
    }
}

}  // namespace trimkv::vision
