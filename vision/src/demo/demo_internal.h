// Pieces of the demo model's training shared by its source files (not public API).
#pragma once
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trimkv/core/adamw.h"
#include "trimkv/core/model_config.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/text_decoder.h"
#include "trimkv/core/tokenizer.h"
#include "trimkv/vision/demo_training.h"
#include "trimkv/vision/idefics3.h"
#include "trimkv/vision/world.h"

namespace trimkv::vision::demo {

// Per visual token, the object whose centre lies in its cell: colour 0 (none) or 1 + Color,
// shape 0 or 1 + Shape, size 0 or 1 + ObjectSize.
inline constexpr int kAuxColors = 1 + world::kNumColors;
inline constexpr int kAuxShapes = 1 + world::kNumShapes;
inline constexpr int kAuxSizes = 1 + world::kNumSizes;
inline constexpr int kAuxOutputs = kAuxColors + kAuxShapes + kAuxSizes;
// Per patch of the tower (before the pixel shuffle), the object covering the patch's centre
// pixel: colour and shape classes as above. Local, dense evidence of shape for the tower.
inline constexpr int kPatchOutputs = kAuxColors + kAuxShapes;
// The lookup probe's fields: the found object's colour, shape, and the row and column of its
// centre's cell (in the side x side grid of visual tokens) and its image (0-based); for a count,
// how many objects match (over one image or all of them: the world asks totals up to 9); for
// "Which image has more", the image with the most.
inline constexpr int64_t kMaxCountAnswer = 9;
enum FoundField { kFoundColor, kFoundShape, kFoundCount, kFoundRow, kFoundCol, kFoundImage, kFoundFields };
inline std::array<int64_t, kFoundFields> found_classes(int64_t side) {
  return {world::kNumColors, world::kNumShapes, kMaxCountAnswer + 1, side, side, world::kMaxImagesLimit};
}

// The ids the model files name.
struct SpecialIds {
  int32_t bos = -1, eos = -1, pad = -1, image = -1;
  static SpecialIds from(const Tokenizer& tok);  // Error{Config} when one is missing
};

// --- the model (demo_model.cpp) ---------------------------------------------------------------

// Error{Input} when the sizes make no model: heads that do not divide widths, or an image side
// that is not a whole number of visual tokens (patch_size x scale_factor pixels each).
void check_demo_size(const DemoModelSize& size);
// config.json of the demo model (checks the sizes first).
nlohmann::json demo_config_json(const DemoModelSize& size, int64_t vocab_size, const SpecialIds& ids);
// processor_config.json (no splitting: one tile of image_size), generation_config.json,
// tokenizer_config.json and chat_template.jinja into `dir` (config.json and tokenizer.json are
// written by the trainer).
void write_demo_side_files(const std::string& dir, const DemoModelSize& size, const SpecialIds& ids);

// Trainable weights, bound to the inference code's own classes (Idefics3Vision, TextDecoder):
// the training forward is the inference forward.
struct DemoModel {
  Idefics3Config vcfg;
  TextConfig tcfg;
  std::shared_ptr<Idefics3Vision> vision;
  std::shared_ptr<TextDecoder> decoder;
  at::Tensor aux_w, aux_b;  // [kAuxOutputs, text_hidden], [kAuxOutputs]: the training probe
  at::Tensor patch_w, patch_b;  // [kPatchOutputs, vision_hidden], [kPatchOutputs]: patch probe
  // [2 side, text_hidden], [2 side]: each visual token's own row and column in its image's
  // side x side grid (so that what the decoder reads from a token says where it is).
  at::Tensor pos_w, pos_b;
  // [sum of found_classes, text_hidden], [...]: the lookup probe. After the objects hop (at the
  // input of the next decoder layer), the word that looked an object up must know that object's
  // colour, shape and place, or how many objects in the image match it. A training aid like the
  // probes above: not exported.
  at::Tensor found_w, found_b;
  // [kMaxImagesLimit, text_hidden], [...]: the image probe (DemoTrainOptions::image_probe_weight),
  // reading the input of the objects hop's layer; undefined when the recipe has none.
  at::Tensor image_w, image_b;
  // [kNumColors + kNumShapes, text_hidden], [...]: the cell readout
  // (DemoTrainOptions::cell_readout_weight); undefined when the recipe has none.
  at::Tensor cell_w, cell_b;
  std::vector<NamedParameter> vision_params;  // tower + connector + probe
  std::vector<NamedParameter> text_params;    // decoder
};
// Fresh weights from `seed` (N(0, 0.02) matrices and embeddings, zero biases, unit norms), for
// the config at `config_path`; with image_probe, the image probe too (drawn last: the other
// weights are the same either way).
// With cell_readout, the cell readout too (drawn after everything else).
DemoModel make_demo_model(const std::string& config_path, uint64_t seed, bool image_probe = false,
                          bool cell_readout = false);
// Every exported tensor under its reference (transformers) name, as a view of the model's own
// tensors (fused q/k/v and gate/up split by narrowing): the one naming table of export and import.
std::vector<std::pair<std::string, at::Tensor>> demo_reference_tensors(const DemoModel& model);
// model.safetensors with the reference names.
void write_demo_weights(const DemoModel& model, const std::string& path);
// The inverse: copies an exported model.safetensors into `model` (Error naming a missing tensor
// or a shape that differs), from a file already open or from its path.
void load_demo_weights(DemoModel& model, const SafetensorsFile& file);
void load_demo_weights(DemoModel& model, const std::string& path);

// --- data (demo_data.cpp) ---------------------------------------------------------------------

// The supervised hops of the answer's lookup, each at decoder layer hop_layer(kind):
// 0 each visual token looks at its image's label ("Image k:"), 1 each word the question names an
// object with (its shape, else its colour) looks at the question, 2 that word looks at the
// cells holding the named objects' centres (for counts and comparisons, those of every matching
// object in the images asked about and the word itself, the mass spread evenly over them: the
// word keeps 1 / (n + 1) of it, which says how many matched; at all the image's tokens for absent
// objects), 3 the position that predicts the answer looks at that word (head 0 at the first
// subject's, head 1 at the second's).
inline constexpr int kAttnHops = 4;
// Hops 0 and 1 share layer 0 (their rows differ: visual tokens, question words), so that the
// lookup is done by layer 2 and the last layer is free to turn what was found into the answer.
inline int64_t hop_layer(int kind, int64_t n_layer) {
  constexpr int64_t kLayer[kAttnHops] = {0, 0, 1, 2};
  return std::min<int64_t>(kLayer[kind], n_layer - 1);
}
// How a hop-2 word finds its evidence: one object by the shape it names or by its colour, every
// matching object (counts, comparisons), or whole images (absent objects). Reported apart: they
// are learnt at very different speeds.
enum Lookup : int8_t { kLookupShape = 0, kLookupColor = 1, kLookupCount = 2, kLookupImage = 3 };
inline constexpr int kLookups = 4;
struct AttnHop {
  std::vector<int64_t> rows;
  std::vector<std::vector<int64_t>> head0, head1;
  std::vector<int8_t> lookup;  // hop 2 only, per row: a Lookup (what the word finds its objects by)
  // Hop 2 with DemoTrainOptions::count_second_kv_head: query head 2 also looks from each count's
  // row, at the targets of heads 0 and 1, spread evenly.
  bool counts_on_head2 = false;
  // The rows query head 2 looks from (indices into `rows`), and its targets from row r (empty
  // for a row it does not look from).
  std::vector<size_t> head2_rows() const {
    std::vector<size_t> out;
    for (size_t r = 0; counts_on_head2 && r < lookup.size(); ++r)
      if (lookup[r] == kLookupCount) out.push_back(r);
    return out;
  }
  std::vector<int64_t> head2(size_t r) const {
    return counts_on_head2 && lookup[r] == kLookupCount ? head0[r] : std::vector<int64_t>{};
  }
  // The weight of each count row's term (heads 0, 1 and 2), the other rows' 1.
  float count_weight = 1.0f;
  std::vector<float> row_weights() const {
    std::vector<float> out;
    for (int8_t l : lookup) out.push_back(l == kLookupCount ? count_weight : 1.0f);
    return out;
  }
  // Per row, whether the mass must be spread evenly over the targets (counts; empty: no row).
  std::vector<uint8_t> spread() const {
    std::vector<uint8_t> out;
    for (int8_t l : lookup) out.push_back(l == kLookupCount ? 1 : 0);
    return out;
  }
};

struct DemoSequence {
  std::vector<int64_t> ids;
  std::vector<int64_t> image_pos;   // positions of the <image> tokens, in order
  int64_t first_image = 0;          // index of its first image in the batch's images
  int64_t n_images = 0;
  std::vector<int64_t> label_pos;   // positions whose next token is a label
  std::vector<int64_t> label_tgt;   // that next token
  std::vector<int32_t> label_turn;  // the turn each label belongs to
  std::vector<std::string> turn_type;  // per turn
  int n_scene_images = 0;           // images in the conversation
  // Attention targets (a training aid; see DemoTrainOptions::attn_weight): per hop kind, the
  // query rows and, per row, the positions query heads 0 and 1 are taught to look at.
  std::array<AttnHop, kAttnHops> hops;
  // The lookup probe's rows (hop-2 words), read after hop 2, and their targets per FoundField:
  // the colour, shape (world::Color, world::Shape), cell and image of the one object the word
  // names, or, for a count, how many objects match it, and for a comparison the image with the most;
  // kNoTarget where a row has none.
  static constexpr int64_t kNoTarget = -100;  // at::nll_loss's ignore_index
  std::vector<int64_t> found_rows;
  std::vector<std::array<int64_t, kFoundFields>> found;
  // The image probe's question rows: the subject word of each "In image k" question, and k - 1.
  std::vector<int64_t> asked_rows, asked_image;
};

struct DemoBatch {
  at::Tensor pixels;       // [N, 3, S, S] every image of the batch
  at::Tensor aux_targets;  // [N, seq, 3] int64: colour, shape, size classes
  at::Tensor patch_targets;  // [N, patches, 2] int64: colour, shape classes
  std::vector<DemoSequence> seqs;
};

class DemoData {
 public:
  // number_hops, count_second_kv_head, count_weight: DemoTrainOptions' (no defaults here: the options own them).
  DemoData(const Tokenizer& tok, const DemoModelSize& size, const Idefics3ProcessorConfig& proc,
           bool number_hops, bool count_second_kv_head, double count_weight);
  // Pixels and per-token targets of scenes, appended to `pixels` / `targets`.
  struct Images {
    std::vector<at::Tensor> pixels, targets, patch_targets;
  };
  void add_images(const std::vector<world::Scene>& scenes, Images& images) const;
  // A conversation laid out as Session would (chat template, image expansion), labels on the
  // answers and their end-of-utterance token; its images appended.
  DemoSequence layout(const world::Conversation& conv, Images& images) const;
  // Pixel tensor of one scene, exactly as the processor makes it from the PNG: [1, 3, S, S].
  at::Tensor scene_pixels(const world::Scene& scene) const;
  at::Tensor scene_targets(const world::Scene& scene) const;  // [seq, 3]
  at::Tensor scene_patch_targets(const world::Scene& scene) const;  // [patches, 2]
  // The visual token (0..image_seq_len-1) whose cell holds the object's centre.
  int64_t object_cell(const world::Scene& scene, const world::Object& object) const;
  // The attention targets of `turn` (its tokens from turn_start are in seq.ids) into seq.hops.
  void add_attention_targets(const world::Conversation& conv, const world::Turn& turn, int64_t turn_start,
                             DemoSequence& seq) const;
  // The batch tensors of `images` (pixels, targets, patch targets) into `batch`.
  static void finish(Images& images, DemoBatch& batch);
  // The batch in up to n parts for data parallelism (shard_gradients.h): whole conversations with
  // their images, balanced by their cost (sequence_cost; the costliest first, each to the part
  // with the least so far; a part keeps the batch's order), or, with no conversations (the vision
  // stage), the images in n even runs. Fewer parts when there are fewer conversations or images
  // than n.
  std::vector<DemoBatch> split(const DemoBatch& batch, int n) const;
  // A chat step's multiply-adds for one conversation, roughly: the decoder's forward and backward
  // over its tokens (linear in them, plus causal attention over their pairs) and the frozen
  // tower's forward over its images.
  double sequence_cost(const DemoSequence& seq) const;
  int64_t image_seq_len() const { return m_seq; }

 private:
  const Tokenizer& m_tok;
  DemoModelSize m_size;
  Idefics3ProcessorConfig m_proc;
  int64_t m_seq = 0, m_side = 0;
  int32_t m_image_id = -1, m_image_edge_id = -1, m_global_id = -1;
  std::vector<int32_t> m_close;
  bool m_number_hops = false;
  bool m_count_second_kv_head = false;
  double m_count_weight = 1.0;
  std::vector<int32_t> m_number_ids;  // [k]: the token of image number k (1-based) alone, or -1
  // The last position in [from, to) holding image number `number` as one token, or -1.
  int64_t number_position(const DemoSequence& seq, int64_t from, int64_t to, int number) const;
};

// --- the loss (demo_trainer.cpp uses it for training and validation) --------------------------

struct BatchLoss {
  at::Tensor answer;   // CE of the answers: per turn the mean over its tokens, then the mean over turns
  at::Tensor aux;      // mean CE of the per-token targets (sum of the three heads) + patch targets
  at::Tensor attn;     // attention targets: mean over turns and supervised heads of -log(mass on the targets)
  at::Tensor found;    // lookup probe: mean CE of the found objects' colour + shape (0 when none)
  int64_t n_found = 0, c_found = 0;  // lookup probe rows, and those with every target right
  at::Tensor image;    // image probe: mean CE over visual tokens and asked-about words (undefined: no probe)
  int64_t n_image = 0, c_image = 0;  // image probe rows, and those right
  at::Tensor cell;     // cell readout: mean squared error over visual tokens (undefined: none)
  std::array<double, kAttnHops> attn_hops{};  // per hop kind, the mean -log mass (diagnostics; -1: none)
  std::array<double, kLookups> lookups{};     // hop 2 per Lookup, the mean -log mass (-1: none)
  int64_t n_turns = 0, n_correct = 0;                 // teacher-forced exact match per turn
  int64_t n_single = 0, c_single = 0, n_multi = 0, c_multi = 0;
  int64_t n_object_cells = 0, c_object_cells = 0, n_empty_cells = 0, c_empty_cells = 0;  // the probe
  std::array<int64_t, 3> c_object_attrs{};  // object cells with the colour, the shape, the size right
};
// Logits [n_label, vocab] at a sequence's label positions, from the batch's visual tokens
// feats [N, seq, hidden] (connector output) and its token ids, through the dense decoder.
// `on_qk` sees each decoder layer's queries and keys (TextDecoder::forward_dense).
at::Tensor sequence_label_logits(const DemoModel& model, const at::Tensor& feats, const DemoSequence& seq,
                                 const TextDecoder::QkObserver& on_qk = {});
// -log of the softmax mass that query head `head` (q [n, n_head, hd], k [n, n_kv, hd], causal)
// puts on targets[t] at position rows[t]: per row [R] (attention_mass_rows), or summed over t.
// Rows flagged in `spread` (empty: none) instead get KL(uniform over their targets || attention),
// 0 when the mass is spread evenly over the targets and nothing else.
at::Tensor attention_mass_rows(const at::Tensor& q, const at::Tensor& k, int64_t head,
                               const std::vector<int64_t>& rows,
                               const std::vector<std::vector<int64_t>>& targets,
                               const std::vector<uint8_t>& spread);
at::Tensor attention_mass_loss(const at::Tensor& q, const at::Tensor& k, int64_t head,
                               const std::vector<int64_t>& rows,
                               const std::vector<std::vector<int64_t>>& targets);
// The denominators of a batch's mean losses, counted from its data before any forward: with
// them, a part of the batch gives its share of each mean (its sum over the whole batch's count),
// and the shares of all parts add up to the whole batch's loss (data parallelism).
struct LossCounts {
  int64_t cells = 0, patches = 0, turns = 0, image_rows = 0, readout_cells = 0;
  std::array<int64_t, kAttnHops> hop_terms{};      // (row, head) terms per hop kind
  std::array<int64_t, kLookups> lookup_terms{};    // hop-2 terms per Lookup
  std::array<int64_t, kFoundFields> found_targets{};  // lookup-probe rows with a target per field
};
LossCounts loss_counts(const DemoModel& model, const DemoBatch& batch, bool want_answers);
// Forward over a batch (tower once for all images, then each sequence through the decoder).
// train_tower = false: the tower runs without gradients (the connector and probes still get them).
// whole: the counts of the batch this one is a part of: every loss (and diagnostic) is then this
// part's share (sum / whole count; 0 where the part has none); null: the batch's own means.
// shape_weight multiplies the dense targets' shape terms (DemoTrainOptions::shape_weight).
BatchLoss batch_loss(const DemoModel& model, const DemoBatch& batch, bool want_answers, bool train_tower,
                     const LossCounts* whole = nullptr, double shape_weight = 1.0);
// What a stage trains: the vision stage the tower, connector and probes; the chat stages also
// the decoder, and the tower only when it is not frozen (at tower_lr_scale times their rate).
std::vector<NamedParameter> stage_params(const DemoModel& m, bool vision_only, bool freeze_tower,
                                         double tower_lr_scale);
// The parts' BatchLoss added up: counters and shares summed (losses detached), diagnostics -1
// where the first part has -1 (none in the whole batch).
BatchLoss add_parts(const std::vector<BatchLoss>& parts);

}  // namespace trimkv::vision::demo
