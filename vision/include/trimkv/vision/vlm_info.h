// What `trimkv info` reports about the vision side of a checkpoint. Plain values (app/ sees it).
#pragma once
#include <cstdint>
#include <string>

namespace trimkv::vision {

struct VisionInfo {
  std::string family;        // VLM family file, e.g. "idefics3"; "" for a text model (no images)
  std::string model_type;    // config.json model_type (idefics3, smolvlm, qwen2_vl, qwen2_5_vl)
  std::string description;
  int64_t vision_parameters = 0;  // tower + connector
  int64_t hidden_size = 0, n_layer = 0, n_head = 0, intermediate_size = 0;
  int64_t image_size = 0, patch_size = 0, scale_factor = 0;
  int64_t image_seq_len = 0;       // visual tokens per tile
  int32_t image_token_id = -1;
  // Processor
  int longest_edge = 0, tile_size = 0;
  bool image_splitting = false;
  int64_t min_pixels = 0, max_pixels = 0;  // any-resolution processors (Qwen-VL); 0: tiles
  std::string resample;

  bool takes_images() const { return !family.empty(); }
};

}  // namespace trimkv::vision
