// Reading a checkpoint's JSON settings (private to vision/): config files, where transformers
// keeps an image processor's settings and the fields every processor shares. Errors name the
// file and the field.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "trimkv/vision/pixel_scaling.h"
#include "trimkv/vision/resample.h"

namespace trimkv::vision {

// `path` parsed as a JSON object. Error{Io} when it cannot be read; Error{Format} naming it when
// it is not JSON or not an object.
nlohmann::json read_json_object(const std::string& path);

// j[key] when it is an object, else an empty object (a missing config section).
const nlohmann::json& json_section(const nlohmann::json& j, const char* key);
// j[key] as a positive integer; `fallback` when absent or null. Error{Config} naming the file and
// the field (`where` + key, e.g. "vision_config.depth") otherwise.
int64_t read_positive_int(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& path,
                          const char* where = "");

// <dir>/preprocessor_config.json, else the "image_processor" object of <dir>/processor_config.json
// (transformers v5); a null value when neither holds settings. `path` receives the file read.
nlohmann::json read_image_processor_settings(const std::string& dir, std::string& path);

// do_rescale, rescale_factor, do_normalize, image_mean, image_std (a number or three).
void read_pixel_scaling(const nlohmann::json& j, const std::string& path, PixelScaling& scaling);
// "resample" (Pillow's number), when present.
void read_resample(const nlohmann::json& j, const std::string& path, ResampleFilter& filter);
// A boolean field, when present and boolean.
bool read_flag(const nlohmann::json& j, const char* key, bool fallback);

}  // namespace trimkv::vision
