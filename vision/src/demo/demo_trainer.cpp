// train_demo (demo_training.h): the stages, checkpoints and progress of the demo model's recipe.
#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <filesystem>
#include <fstream>

#include "demo/demo_internal.h"
#include "trimkv/core/bpe_trainer.h"
#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_training.h"
#include "trimkv/core/shard_gradients.h"
#include "trimkv/core/weight_store.h"
#include "trimkv/vision/gate_training_media.h"
#include "trimkv/vision/vlm.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace trimkv::vision {

namespace demo {

namespace {

at::Tensor class_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::nll_loss(at::log_softmax(logits.reshape({-1, logits.size(-1)}), -1), targets.reshape({-1}));
}

// The mean cross-entropy of a batch (whole == 0), or a part's share of the whole batch's: its sum
// over the whole batch's count of targets (DemoSequence::kNoTarget rows ignored either way).
at::Tensor class_loss_share(const at::Tensor& logits, const at::Tensor& targets, int64_t whole) {
  if (whole == 0) return class_loss(logits, targets);
  return at::nll_loss(at::log_softmax(logits.reshape({-1, logits.size(-1)}), -1), targets.reshape({-1}), {},
                      at::Reduction::Sum, DemoSequence::kNoTarget) /
         static_cast<double>(whole);
}

int64_t found_layer(int64_t n_layer) { return hop_layer(2, n_layer) + 1; }  // the lookup probe's input

}  // namespace

at::Tensor sequence_label_logits(const DemoModel& model, const at::Tensor& feats, const DemoSequence& s,
                                 const TextDecoder::QkObserver& on_qk) {
  const int64_t n = static_cast<int64_t>(s.ids.size());
  at::Tensor x = model.decoder->embed(at::tensor(s.ids, at::kLong));
  if (s.n_images > 0)
    x = x.index_copy(0, at::tensor(s.image_pos, at::kLong),
                     feats.narrow(0, s.first_image, s.n_images).reshape({-1, model.tcfg.hidden_size}));
  const at::Tensor hidden = model.decoder->forward_dense(x, at::arange(n, at::kLong), {}, nullptr, nullptr, on_qk);
  return model.decoder->logits(hidden.index_select(0, at::tensor(s.label_pos, at::kLong)));
}

at::Tensor attention_mass_rows(const at::Tensor& q, const at::Tensor& k, int64_t head,
                               const std::vector<int64_t>& rows,
                               const std::vector<std::vector<int64_t>>& targets,
                               const std::vector<uint8_t>& spread) {
  const int64_t n_rows = static_cast<int64_t>(rows.size()), n = k.size(0);
  const int64_t group = q.size(1) / k.size(1);  // query heads per KV head
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  const at::Tensor r = at::tensor(rows, at::kLong);
  const at::Tensor visible = at::arange(n, at::kLong).unsqueeze(0) <= r.unsqueeze(1);  // causal, [R, n]
  std::vector<uint8_t> mask(static_cast<size_t>(n_rows * n), 0);
  for (int64_t t = 0; t < n_rows; ++t)
    for (int64_t p : targets[static_cast<size_t>(t)]) mask[static_cast<size_t>(t * n + p)] = 1;
  const at::Tensor target = at::from_blob(mask.data(), {n_rows, n}, at::kByte).to(at::kBool);
  const at::Tensor logits = at::matmul(q.select(1, head).index_select(0, r), k.select(1, head / group).t()) * scale;
  const at::Tensor logp = at::log_softmax(logits.masked_fill(~visible, -INFINITY), -1);
  const at::Tensor mass = -at::logsumexp(logp.masked_fill(~target, -INFINITY), -1);
  if (spread.empty()) return mass;
  TRIMKV_ASSERT(spread.size() == rows.size(), "attention targets: ", spread.size(), " spread flags for ",
                rows.size(), " rows");
  // KL(uniform over the targets || attention): -mean log p over the targets - log(their number).
  std::vector<float> count(rows.size()), flag(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    count[t] = static_cast<float>(targets[t].size());
    flag[t] = spread[t] ? 1.0f : 0.0f;
  }
  const at::Tensor n_t = at::tensor(count, at::kFloat), is_spread = at::tensor(flag, at::kFloat);
  const at::Tensor kl = -logp.masked_fill(~target, 0).sum(-1) / n_t - at::log(n_t);
  return at::where(is_spread > 0, kl, mass);
}

at::Tensor attention_mass_loss(const at::Tensor& q, const at::Tensor& k, int64_t head,
                               const std::vector<int64_t>& rows,
                               const std::vector<std::vector<int64_t>>& targets) {
  return attention_mass_rows(q, k, head, rows, targets, {}).sum();
}

LossCounts loss_counts(const DemoModel& model, const DemoBatch& batch, bool want_answers) {
  LossCounts c;
  if (!batch.pixels.defined()) return c;
  c.cells = batch.aux_targets.size(0) * batch.aux_targets.size(1);
  c.patches = batch.patch_targets.size(0) * batch.patch_targets.size(1);
  if (!want_answers) return c;
  const int64_t n_layer = model.tcfg.n_layer;
  for (const DemoSequence& s : batch.seqs) {
    c.turns += static_cast<int64_t>(s.turn_type.size());
    for (int kind = 0; kind < kAttnHops; ++kind) {
      const AttnHop& hop = s.hops[static_cast<size_t>(kind)];
      c.hop_terms[static_cast<size_t>(kind)] += 2 * static_cast<int64_t>(hop.rows.size());
      for (int8_t g : hop.lookup) c.lookup_terms[static_cast<size_t>(g)] += 2;
      for (size_t r : hop.head2_rows()) {
        ++c.hop_terms[static_cast<size_t>(kind)];
        ++c.lookup_terms[static_cast<size_t>(hop.lookup[r])];
      }
    }
    if (found_layer(n_layer) < n_layer)
      for (const auto& f : s.found)
        for (int64_t k = 0; k < kFoundFields; ++k)
          c.found_targets[static_cast<size_t>(k)] += f[static_cast<size_t>(k)] != DemoSequence::kNoTarget;
    if (model.image_w.defined() && s.n_images > 0)
      c.image_rows += static_cast<int64_t>(s.image_pos.size() + s.asked_rows.size());
    if (model.cell_w.defined()) c.readout_cells += static_cast<int64_t>(s.image_pos.size());
  }
  return c;
}

BatchLoss batch_loss(const DemoModel& model, const DemoBatch& batch, bool want_answers, bool train_tower,
                     const LossCounts* whole, double shape_weight) {
  BatchLoss out;
  const int64_t cells = whole ? whole->cells : 0, patches = whole ? whole->patches : 0;
  at::Tensor tower;  // [N, P, D]
  if (train_tower) {
    tower = model.vision->tower_batched(batch.pixels);
  } else {
    at::NoGradGuard frozen;
    tower = model.vision->tower_batched(batch.pixels);
  }
  const at::Tensor feats = model.vision->connector(tower);                                     // [N, seq, h]
  const at::Tensor probe = at::linear(feats, model.aux_w, model.aux_b);                        // [N, seq, K]
  const at::Tensor patch = at::linear(tower, model.patch_w, model.patch_b);                    // [N, P, 11]
  // Times 1 (the recipe) is exact, forward and backward.
  const at::Tensor cell_shape =
      class_loss_share(probe.narrow(-1, kAuxColors, kAuxShapes), batch.aux_targets.select(-1, 1), cells) * shape_weight;
  const at::Tensor patch_shape =
      class_loss_share(patch.narrow(-1, kAuxColors, kAuxShapes), batch.patch_targets.select(-1, 1), patches) *
      shape_weight;
  out.aux = class_loss_share(probe.narrow(-1, 0, kAuxColors), batch.aux_targets.select(-1, 0), cells) + cell_shape +
            class_loss_share(probe.narrow(-1, kAuxColors + kAuxShapes, kAuxSizes), batch.aux_targets.select(-1, 2),
                             cells) +
            class_loss_share(patch.narrow(-1, 0, kAuxColors), batch.patch_targets.select(-1, 0), patches) + patch_shape;
  {
    const int64_t n = feats.size(0), seq = feats.size(1), side = model.pos_w.size(0) / 2;
    const at::Tensor cell = at::arange(seq, at::kLong).unsqueeze(0).expand({n, seq});
    const at::Tensor where = at::linear(feats, model.pos_w, model.pos_b);  // [N, seq, 2 side]
    out.aux = out.aux + class_loss_share(where.narrow(-1, 0, side), at::floor_divide(cell, side), cells) +
              class_loss_share(where.narrow(-1, side, side), at::remainder(cell, side), cells);
  }
  {
    // Probe accuracy: cells holding an object centre with colour, shape and size all right;
    // empty cells predicted empty.
    const at::Tensor pred = at::stack({probe.narrow(-1, 0, kAuxColors).argmax(-1),
                                       probe.narrow(-1, kAuxColors, kAuxShapes).argmax(-1),
                                       probe.narrow(-1, kAuxColors + kAuxShapes, kAuxSizes).argmax(-1)},
                                      -1);
    const at::Tensor all_right = (pred == batch.aux_targets).all(-1);
    const at::Tensor object = batch.aux_targets.select(-1, 0) > 0;
    out.n_object_cells = object.sum().item<int64_t>();
    out.c_object_cells = (all_right & object).sum().item<int64_t>();
    for (int64_t a = 0; a < 3; ++a)
      out.c_object_attrs[static_cast<size_t>(a)] =
          ((pred.select(-1, a) == batch.aux_targets.select(-1, a)) & object).sum().item<int64_t>();
    out.n_empty_cells = (~object).sum().item<int64_t>();
    out.c_empty_cells = (all_right & ~object).sum().item<int64_t>();
  }
  if (!want_answers || batch.seqs.empty()) return out;
  std::vector<at::Tensor> sums;
  int64_t n_turns = 0;
  // Attention targets: per hop kind, the summed -log mass and the number of (row, head) terms.
  std::array<at::Tensor, kAttnHops> hop_sum;
  std::array<int64_t, kAttnHops> hop_n{};
  std::array<double, kLookups> lookup_sum{};
  std::array<int64_t, kLookups> lookup_n{};
  const int64_t n_layer = model.tcfg.n_layer;
  std::vector<at::Tensor> found_logits, found_targets, image_logits, image_targets, cell_errors;
  for (const DemoSequence& s : batch.seqs) {
    const at::Tensor logits = sequence_label_logits(
        model, feats, s, [&](int64_t layer, const at::Tensor& h, const at::Tensor& q, const at::Tensor& k) {
          // The lookup probe reads the input of the layer after the objects hop (none when that
          // hop is in the last layer).
          if (layer == found_layer(n_layer) && !s.found_rows.empty()) {
            found_logits.push_back(
                at::linear(h.index_select(0, at::tensor(s.found_rows, at::kLong)), model.found_w, model.found_b));
            std::vector<int64_t> t;
            for (const auto& f : s.found) t.insert(t.end(), f.begin(), f.end());
            found_targets.push_back(at::tensor(t, at::kLong).view({-1, kFoundFields}));
          }
          // The image probe reads the input of the objects hop's layer: every visual token (its
          // image) and every "In image k" question's word (k).
          if (model.image_w.defined() && layer == hop_layer(2, n_layer) && s.n_images > 0) {
            std::vector<int64_t> rows = s.image_pos, t;
            const int64_t per_image = static_cast<int64_t>(s.image_pos.size()) / s.n_images;
            for (size_t i = 0; i < s.image_pos.size(); ++i) t.push_back(static_cast<int64_t>(i) / per_image);
            rows.insert(rows.end(), s.asked_rows.begin(), s.asked_rows.end());
            t.insert(t.end(), s.asked_image.begin(), s.asked_image.end());
            image_logits.push_back(
                at::linear(h.index_select(0, at::tensor(rows, at::kLong)), model.image_w, model.image_b));
            image_targets.push_back(at::tensor(t, at::kLong));
          }
          // The cell readout reads the same input (the states after the layer's RMSNorm, which its
          // keys are linear in): every visual token's must give its object's colour and shape as
          // 0/1 indicators (all 0 for an empty cell).
          if (model.cell_w.defined() && layer == hop_layer(2, n_layer) && s.n_images > 0) {
            const at::Tensor states = h.index_select(0, at::tensor(s.image_pos, at::kLong));
            const at::Tensor t = batch.aux_targets.narrow(0, s.first_image, s.n_images).reshape({-1, 3});
            // Class 0 is "no object": one_hot over 1 + K classes, the first column dropped.
            const at::Tensor want = at::cat({at::one_hot(t.select(-1, 0), kAuxColors).narrow(-1, 1, kAuxColors - 1),
                                             at::one_hot(t.select(-1, 1), kAuxShapes).narrow(-1, 1, kAuxShapes - 1)},
                                            -1)
                                        .to(at::kFloat);
            cell_errors.push_back((at::linear(states, model.cell_w, model.cell_b) - want).pow(2).sum(-1));  // per token
          }
          for (int kind = 0; kind < kAttnHops; ++kind) {
            const AttnHop& hop = s.hops[static_cast<size_t>(kind)];
            if (hop.rows.empty() || hop_layer(kind, n_layer) != layer) continue;
            const std::vector<uint8_t> spread = hop.spread();
            const at::Tensor per_row = attention_mass_rows(q, k, 0, hop.rows, hop.head0, spread) +
                                       attention_mass_rows(q, k, q.size(1) > 1 ? 1 : 0, hop.rows, hop.head1, spread);
            // The diagnostics: the same terms per lookup (`heads` terms in each row's value).
            auto tally_lookups = [&](const at::Tensor& rows_loss, const std::vector<int8_t>& lookups, int64_t heads) {
              const at::Tensor values = rows_loss.detach().contiguous();
              const float* v = values.data_ptr<float>();
              for (size_t r = 0; r < lookups.size(); ++r) {
                lookup_sum[static_cast<size_t>(lookups[r])] += v[r];
                lookup_n[static_cast<size_t>(lookups[r])] += heads;
              }
            };
            // Count rows weighted (count_weight; at 1 the sum is the recipe's, bit for bit).
            const bool weighted = hop.count_weight != 1.0f;
            const at::Tensor row_w = weighted ? at::tensor(hop.row_weights(), at::kFloat) : at::Tensor();
            at::Tensor l = weighted ? (per_row * row_w).sum() : per_row.sum();
            tally_lookups(per_row, hop.lookup, 2);
            hop_n[kind] += 2 * static_cast<int64_t>(hop.rows.size());
            // Query head 2 (the other KV head's, when there is one) on the counts' rows, spread
            // evenly (count_second_kv_head).
            std::vector<int64_t> rows2;
            std::vector<std::vector<int64_t>> targets2;
            std::vector<int8_t> lookup2;
            for (size_t r : hop.head2_rows()) {
              rows2.push_back(hop.rows[r]);
              targets2.push_back(hop.head0[r]);
              lookup2.push_back(hop.lookup[r]);
            }
            if (!rows2.empty()) {
              const int64_t head2 = std::min<int64_t>(2, q.size(1) - 1);
              const at::Tensor per_row2 =
                  attention_mass_rows(q, k, head2, rows2, targets2, std::vector<uint8_t>(rows2.size(), 1));
              l = l + (weighted ? per_row2 * hop.count_weight : per_row2).sum();
              tally_lookups(per_row2, lookup2, 1);
              hop_n[kind] += static_cast<int64_t>(rows2.size());
            }
            hop_sum[kind] = hop_sum[kind].defined() ? hop_sum[kind] + l : l;
          }
        });
    const at::Tensor tgt = at::tensor(s.label_tgt, at::kLong);
    // Every turn weighs the same, however many tokens its answer has (a caption has ~20, most
    // answers 2): each token's loss is divided by its turn's token count.
    std::vector<float> weight(s.label_turn.size());
    std::vector<int64_t> per_turn(s.turn_type.size(), 0);
    for (int32_t t : s.label_turn) ++per_turn[static_cast<size_t>(t)];
    for (size_t i = 0; i < weight.size(); ++i)
      weight[i] = 1.0f / static_cast<float>(per_turn[static_cast<size_t>(s.label_turn[i])]);
    const at::Tensor ce = at::nll_loss(at::log_softmax(logits, -1), tgt, {}, at::Reduction::None);
    sums.push_back((ce * at::tensor(weight, at::kFloat)).sum());
    n_turns += static_cast<int64_t>(s.turn_type.size());
    // Teacher-forced exact match per turn: every label token is the argmax.
    const at::Tensor hit = (logits.detach().argmax(-1) == tgt).to(at::kByte).contiguous();
    const uint8_t* hp = hit.data_ptr<uint8_t>();
    std::vector<uint8_t> ok(s.turn_type.size(), 1);
    for (size_t i = 0; i < s.label_turn.size(); ++i) ok[static_cast<size_t>(s.label_turn[i])] &= hp[i];
    for (size_t k = 0; k < ok.size(); ++k) {
      ++out.n_turns;
      out.n_correct += ok[k];
      if (s.n_scene_images == 1) ++out.n_single, out.c_single += ok[k];
      else ++out.n_multi, out.c_multi += ok[k];
    }
  }
  out.answer = at::stack(sums).sum() / static_cast<double>(std::max<int64_t>(1, whole ? whole->turns : n_turns));
  out.found = at::zeros({});
  if (!found_logits.empty()) {
    const at::Tensor fl = at::cat(found_logits, 0), ft = at::cat(found_targets, 0);
    at::Tensor right = at::ones({fl.size(0)}, at::kBool);
    int64_t offset = 0;
    for (int64_t c = 0; c < kFoundFields; ++c) {
      const int64_t classes = found_classes(model.pos_w.size(0) / 2)[static_cast<size_t>(c)];
      const at::Tensor logits = fl.narrow(-1, offset, classes), t = ft.select(-1, c);
      const at::Tensor has = t != DemoSequence::kNoTarget;
      offset += classes;
      if (!has.any().item<bool>()) continue;  // nll_loss of only ignored rows is NaN
      out.found = out.found + class_loss_share(logits, t, whole ? whole->found_targets[static_cast<size_t>(c)] : 0);
      right = right & (~has | (logits.detach().argmax(-1) == t));
    }
    out.n_found = fl.size(0);
    out.c_found = right.sum().item<int64_t>();
  }
  if (!image_logits.empty()) {
    const at::Tensor il = at::cat(image_logits, 0), it = at::cat(image_targets, 0);
    out.image = class_loss_share(il, it, whole ? whole->image_rows : 0);
    out.n_image = il.size(0);
    out.c_image = (il.detach().argmax(-1) == it).sum().item<int64_t>();
  }
  if (!cell_errors.empty()) {
    const at::Tensor e = at::cat(cell_errors);
    out.cell = whole ? e.sum() / static_cast<double>(std::max<int64_t>(1, whole->readout_cells)) : e.mean();
  }
  out.attn = at::zeros({});
  for (int kind = 0; kind < kAttnHops; ++kind) {
    const int64_t terms = whole ? whole->hop_terms[static_cast<size_t>(kind)] : hop_n[kind];
    out.attn_hops[kind] = terms > 0 ? 0.0 : -1.0;
    if (hop_n[kind] == 0) continue;
    const at::Tensor mean = hop_sum[kind] / static_cast<double>(terms);
    out.attn = out.attn + mean;
    out.attn_hops[kind] = mean.item<double>();
  }
  for (int g = 0; g < kLookups; ++g) {
    const int64_t terms = whole ? whole->lookup_terms[static_cast<size_t>(g)] : lookup_n[g];
    out.lookups[g] = terms > 0 ? lookup_sum[g] / static_cast<double>(terms) : -1.0;
  }
  return out;
}

BatchLoss add_parts(const std::vector<BatchLoss>& parts) {
  BatchLoss t;
  if (parts.empty()) return t;
  auto add = [](at::Tensor& into, const at::Tensor& x) {
    if (!x.defined()) return;
    into = into.defined() ? into + x.detach() : x.detach();
  };
  t.attn_hops = parts.front().attn_hops;
  t.lookups = parts.front().lookups;
  for (size_t k = 0; k < parts.size(); ++k) {
    const BatchLoss& p = parts[k];
    add(t.answer, p.answer), add(t.aux, p.aux), add(t.attn, p.attn), add(t.found, p.found), add(t.image, p.image);
    add(t.cell, p.cell);
    t.n_found += p.n_found, t.c_found += p.c_found, t.n_image += p.n_image, t.c_image += p.c_image;
    t.n_turns += p.n_turns, t.n_correct += p.n_correct;
    t.n_single += p.n_single, t.c_single += p.c_single, t.n_multi += p.n_multi, t.c_multi += p.c_multi;
    t.n_object_cells += p.n_object_cells, t.c_object_cells += p.c_object_cells;
    t.n_empty_cells += p.n_empty_cells, t.c_empty_cells += p.c_empty_cells;
    for (size_t a = 0; a < 3; ++a) t.c_object_attrs[a] += p.c_object_attrs[a];
    if (k == 0) continue;
    for (size_t h = 0; h < t.attn_hops.size(); ++h)
      if (t.attn_hops[h] >= 0) t.attn_hops[h] += p.attn_hops[h];
    for (size_t g = 0; g < t.lookups.size(); ++g)
      if (t.lookups[g] >= 0) t.lookups[g] += p.lookups[g];
  }
  return t;
}

std::vector<NamedParameter> stage_params(const DemoModel& m, bool vision_only, bool freeze_tower,
                                         double tower_lr_scale) {
  if (vision_only) return m.vision_params;
  std::vector<NamedParameter> p;
  for (const NamedParameter& v : m.vision_params) {
    const bool tower = v.name.rfind("vision.", 0) == 0;
    if (freeze_tower && tower) continue;
    p.push_back(v);
    if (tower) p.back().lr_scale = tower_lr_scale;
  }
  p.insert(p.end(), m.text_params.begin(), m.text_params.end());
  return p;
}

}  // namespace demo

namespace {

using namespace demo;

constexpr const char* kCheckpointFormat = "trimkv-demo-checkpoint";
constexpr int64_t kStageIndexStride = 1000000000;  // conversation indices of stage i start at i * stride

struct Stage {
  const char* name;
  DemoStage cfg;
  bool vision_only;
};

json options_json(const DemoTrainOptions& o) {
  const auto& z = o.size;
  auto stage = [](const DemoStage& s) {
    json j{{"steps", s.steps}, {"batch", s.batch}, {"lr", s.lr}, {"max_images", s.max_images}};
    if (s.max_objects != world::kMaxObjectsLimit) j["max_objects"] = s.max_objects;  // only when not the default
    if (s.min_objects != 1) j["min_objects"] = s.min_objects;  // only when not 1: the recipe before item 28 still matches
    if (s.objects_ramp != 0) j["objects_ramp"] = s.objects_ramp;
    return j;
  };
  json j = {{"seed", o.seed},
          {"size",
           {z.image_size, z.patch_size, z.scale_factor, z.vision_hidden, z.vision_layers, z.vision_heads,
            z.vision_ffn, z.text_hidden, z.text_layers, z.text_heads, z.text_kv_heads, z.text_ffn, z.rope_theta}},
          {"vision", stage(o.vision)},
          {"chat_short", stage(o.chat_short)},
          {"chat", stage(o.chat)},
          {"min_lr_fraction", o.min_lr_fraction},
          {"warmup", o.warmup},
          {"weight_decay", o.weight_decay},
          {"clip", o.clip},
          {"aux_weight", o.aux_weight},
          {"attn_weight", o.attn_weight},
          {"freeze_tower", o.freeze_tower},
          {"max_extra_turns", o.max_extra_turns},
          {"describe_probability", o.describe_probability},
          {"tokenizer_conversations", o.tokenizer_conversations}};
  if (!o.init_from.empty()) j["init_from"] = o.init_from;
  if (o.image_probe_weight > 0) j["image_probe_weight"] = o.image_probe_weight;  // only when used
  j["number_hops"] = o.number_hops;
  if (o.count_second_kv_head) j["count_second_kv_head"] = true;  // only when used
  if (o.count_weight != 1.0) j["count_weight"] = o.count_weight;   // only when used
  if (o.shape_weight != 1.0) j["shape_weight"] = o.shape_weight;   // only when not 1: as min_objects
  if (o.cell_readout_weight > 0) j["cell_readout_weight"] = o.cell_readout_weight;  // only when used
  if (o.tower_lr_scale != 1.0) j["tower_lr_scale"] = o.tower_lr_scale;              // only when used
  if (z.qk_norm) j["qk_norm"] = true;  // only when used: a Llama run's checkpoints (--no-qk-norm) still match
  if (o.shards != 1) j["shards"] = o.shards;  // only when used: checkpoints of one part still match
  if (o.polish.steps > 0) j["polish"] = stage(o.polish);  // only when used: so do the recipe's before it
  if (o.average_last > 0) j["average_last"] = o.average_last;  // only when used
  return j;
}

void check_options(const DemoTrainOptions& o) {
  TRIMKV_CHECK(!o.out_dir.empty(), Input, "--out is required");
  for (const auto& [name, s] : {std::pair<const char*, const DemoStage*>{"vision", &o.vision},
                                {"chat-short", &o.chat_short},
                                {"chat", &o.chat},
                                {"polish", &o.polish}}) {
    TRIMKV_CHECK(s->steps >= 0 && s->batch > 0 && s->lr > 0, Input, "stage ", name,
                 ": steps must be >= 0, batch > 0 and lr > 0 (got ", s->steps, ", ", s->batch, ", ", s->lr, ")");
    TRIMKV_CHECK(s->objects_ramp >= 0 && s->max_objects >= 1 && s->max_objects <= world::kMaxObjectsLimit, Input,
                 "stage ", name, ": max objects must be in 1..", world::kMaxObjectsLimit, " and the ramp >= 0");
    TRIMKV_CHECK(s->min_objects >= 1 && s->min_objects <= s->max_objects, Input, "stage ", name,
                 ": min objects must be in 1..", s->max_objects, " (its max objects), got ", s->min_objects);
    TRIMKV_CHECK(s->max_images >= 1 && s->max_images <= world::kMaxImagesLimit, Input, "stage ", name,
                 ": max images must be in 1..", world::kMaxImagesLimit);
  }
  TRIMKV_CHECK(o.tokenizer_conversations > 0 && o.val_conversations >= 0 && o.checkpoint_every >= 0 &&
                   o.warmup >= 0 && o.max_extra_turns >= 0,
               Input, "train-demo: counts must be non-negative (tokenizer conversations > 0)");
  TRIMKV_CHECK(o.threads >= 0, Input, "--threads must be >= 0, got ", o.threads);
  TRIMKV_CHECK(o.shape_weight >= 0, Input, "--shape-weight must be >= 0, got ", o.shape_weight);
  TRIMKV_CHECK(o.average_last >= 0, Input, "--average-last must be >= 0, got ", o.average_last);
  TRIMKV_CHECK(o.shards >= 1 && o.shards <= 64, Input, "--shards must be in 1..64, got ", o.shards);
  TRIMKV_CHECK(o.size.image_size >= world::kMinImageSize && o.size.image_size <= world::kMaxImageSize, Input,
               "image size must be in ", world::kMinImageSize, "..", world::kMaxImageSize);
  check_demo_size(o.size);  // before the tokenizer is trained, not at the config it writes
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<NamedParameter> all_params(const DemoModel& m) {
  std::vector<NamedParameter> p = m.vision_params;
  p.insert(p.end(), m.text_params.begin(), m.text_params.end());
  return p;
}

// A step's batch: entry b's images and sequence (none in the vision stage: an empty one) made by
// make(b, images), on every compute thread at once. An entry depends only on its index, so the batch is the one
// made in order, bit for bit (a short run's files compared with cmp); that run took 3% less time.
template <typename Make>
DemoBatch step_batch(int64_t n, const Make& make) {
  std::vector<DemoData::Images> parts(static_cast<size_t>(n));
  std::vector<DemoSequence> seqs(static_cast<size_t>(n));
  at::parallel_for(0, n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) seqs[static_cast<size_t>(b)] = make(b, parts[static_cast<size_t>(b)]);
  });
  auto append = [](std::vector<at::Tensor>& to, const std::vector<at::Tensor>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  DemoBatch batch;
  DemoData::Images images;
  for (size_t b = 0; b < parts.size(); ++b) {
    if (!seqs[b].ids.empty()) {
      seqs[b].first_image += static_cast<int64_t>(images.pixels.size());
      batch.seqs.push_back(std::move(seqs[b]));
    }
    append(images.pixels, parts[b].pixels);
    append(images.targets, parts[b].targets);
    append(images.patch_targets, parts[b].patch_targets);
  }
  DemoData::finish(images, batch);
  return batch;
}

}  // namespace

DemoResult train_demo(const DemoTrainOptions& o, const std::function<void(const std::string&)>& on_message,
                      const std::function<void(const DemoProgress&)>& on_progress,
                      const std::atomic<bool>* cancel) {
  check_options(o);
  // LibTorch counts physical cores; on a 2-vCPU machine that is one thread, half the speed.
  const int threads = set_compute_threads(o.threads);
  auto say = [&](const std::string& s) {
    if (on_message) on_message(s);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path dir(o.out_dir), train_dir = dir / "train";
  std::error_code ec;
  fs::create_directories(train_dir, ec);
  TRIMKV_CHECK(!ec, Io, "cannot create '", train_dir.string(), "': ", ec.message());
  const std::string ckpt_path = (train_dir / "checkpoint.safetensors").string();
  const json opt_json = options_json(o);
  const bool resuming = (o.resume || o.export_only) && fs::exists(ckpt_path);
  if (o.resume && !resuming) say("no checkpoint in '" + train_dir.string() + "': starting from the beginning");

  world::WorldOptions wopt;
  world::TrainingExtras extras;
  extras.max_extra_turns = o.max_extra_turns;
  extras.describe_probability = o.describe_probability;

  // --init-from a model folder (or its model.safetensors) rather than a checkpoint: its weights
  // come under the exported names, and its own tokenizer goes with them.
  std::string init_weights = o.init_from;
  if (!o.init_from.empty() && fs::is_directory(o.init_from)) init_weights = (fs::path(o.init_from) / "model.safetensors").string();
  std::unique_ptr<SafetensorsFile> init_file;  // opened once: what it holds decides how it loads
  if (!resuming && !init_weights.empty()) init_file = std::make_unique<SafetensorsFile>(init_weights);
  const bool init_is_model = init_file && init_file->tensors().count("lm_head.weight") > 0;
  // 1. Tokenizer (deterministic: rebuilt the same on resume).
  const std::string tok_path = (dir / "tokenizer.json").string();
  if (init_is_model && !fs::exists(tok_path)) {
    const fs::path model_tok = fs::path(init_weights).parent_path() / "tokenizer.json";
    TRIMKV_CHECK(fs::exists(model_tok), Input, "--init-from '", o.init_from, "': no tokenizer.json beside its weights");
    fs::copy_file(model_tok, tok_path);
  }
  if ((!resuming && o.init_from.empty()) || !fs::exists(tok_path)) {
    TRIMKV_CHECK(!o.export_only, Input, "--export-checkpoint: no checkpoint in '", train_dir.string(), "'");
    say("tokenizer: training byte-level BPE on " + std::to_string(o.tokenizer_conversations) + " conversations");
    BpeTrainer bpe{BpeTrainerOptions{}};
    for (int64_t i = 0; i < o.tokenizer_conversations; ++i) {
      const world::Conversation c = world::make_training_conversation(o.seed, i, wopt, extras);
      std::vector<std::pair<std::string, std::string>> pairs;
      for (const auto& t : c.turns) pairs.emplace_back(t.text, t.answer);
      bpe.add_text(world::chat_text(pairs));
    }
    save_tokenizer_json(bpe.train(), tok_path);
  }
  const Tokenizer tok = Tokenizer::from_file(tok_path);
  const SpecialIds ids = SpecialIds::from(tok);
  const std::string config_path = (dir / "config.json").string();
  {
    std::ofstream out(config_path, std::ios::binary);
    out << demo_config_json(o.size, tok.vocab_size(), ids).dump(2) << "\n";
    TRIMKV_CHECK(out.good(), Io, "cannot write '", config_path, "'");
  }
  write_demo_side_files(dir.string(), o.size, ids);
  say("tokenizer: " + std::to_string(tok.vocab_size()) + " tokens");

  DemoModel model = make_demo_model(config_path, o.seed, o.image_probe_weight > 0, o.cell_readout_weight > 0);
  const Idefics3ProcessorConfig proc = Idefics3ProcessorConfig::from_folder(dir.string());
  const DemoData data(tok, o.size, proc, o.number_hops, o.count_second_kv_head, o.count_weight);
  int64_t n_params = 0;
  for (const auto& p : all_params(model)) n_params += p.tensor.numel();
  say("model: " + std::to_string(n_params) + " parameters (probe included), " +
      std::to_string(data.image_seq_len()) + " visual tokens per image");

  // Validation conversations (the world's validation split), laid out once.
  DemoBatch val;
  {
    DemoData::Images images;
    for (int64_t i = 0; i < o.val_conversations; ++i)
      val.seqs.push_back(data.layout(world::make_conversation(o.seed, world::Split::Val, i, wopt), images));
    DemoData::finish(images, val);
  }
  auto validate = [&](DemoProgress& pr, bool answers) {
    if (val.seqs.empty()) return;
    // Chunks of 16 conversations, each with one compute thread, on every thread at once.
    const size_t chunk = 16;
    std::vector<BatchLoss> chunks((val.seqs.size() + chunk - 1) / chunk);
    run_parts(static_cast<int>(chunks.size()), threads, [&](int c) {
      at::NoGradGuard no_grad;  // per thread
      DemoBatch b;
      const size_t a = static_cast<size_t>(c) * chunk, e = std::min(val.seqs.size(), a + chunk);
      const int64_t first = val.seqs[a].first_image;
      const int64_t last = val.seqs[e - 1].first_image + val.seqs[e - 1].n_images;
      b.pixels = val.pixels.narrow(0, first, last - first);
      b.aux_targets = val.aux_targets.narrow(0, first, last - first);
      b.patch_targets = val.patch_targets.narrow(0, first, last - first);
      for (size_t k = a; k < e; ++k) {
        DemoSequence s = val.seqs[k];
        s.first_image -= first;
        b.seqs.push_back(std::move(s));
      }
      chunks[static_cast<size_t>(c)] = batch_loss(model, b, answers, false, nullptr, o.shape_weight);
    });
    const BatchLoss total = add_parts(chunks);  // its counters: every chunk's
    auto frac = [](int64_t c, int64_t n) { return n > 0 ? static_cast<double>(c) / static_cast<double>(n) : -1.0; };
    pr.val_accuracy = frac(total.n_correct, total.n_turns);
    pr.val_single = frac(total.c_single, total.n_single);
    pr.val_multi = frac(total.c_multi, total.n_multi);
    pr.val_probe_objects = frac(total.c_object_cells, total.n_object_cells);
    pr.val_probe_empty = frac(total.c_empty_cells, total.n_empty_cells);
    for (size_t a = 0; a < 3; ++a) pr.val_probe_attrs[a] = frac(total.c_object_attrs[a], total.n_object_cells);
    pr.val_found = frac(total.c_found, total.n_found);
    pr.val_image = frac(total.c_image, total.n_image);
  };

  DemoResult result;
  result.model_dir = dir.string();
  const std::vector<Stage> stages = {{"vision", o.vision, true}, {"chat-short", o.chat_short, false},
                                     {"chat", o.chat, false}, {"polish", o.polish, false}};
  int64_t stage_index = 0, step = 0;
  SafetensorsFile* ckpt_file = nullptr;
  std::unique_ptr<SafetensorsFile> ckpt_holder;
  if (resuming) {
    ckpt_holder = std::make_unique<SafetensorsFile>(ckpt_path);
    ckpt_file = ckpt_holder.get();
    const auto& meta = ckpt_file->metadata();
    TRIMKV_CHECK(meta.count("format") && meta.at("format") == kCheckpointFormat && meta.count("options") &&
                     meta.count("stage") && meta.count("step"),
                 Format, "'", ckpt_path, "' is not a train-demo checkpoint");
    const json saved = json::parse(meta.at("options"));
    TRIMKV_CHECK(o.export_only || saved == opt_json, Input, "--resume: checkpoint '", ckpt_path,
                 "' was made with other options (", saved.dump(), "); use the same options or start afresh");
    at::NoGradGuard no_grad;
    for (auto& p : all_params(model)) {
      auto it = ckpt_file->tensors().find("param." + p.name);
      TRIMKV_CHECK(it != ckpt_file->tensors().end(), Format, "checkpoint '", ckpt_path, "' lacks '", p.name, "'");
      p.tensor.copy_(tensor_to_float(it->second));
    }
    stage_index = std::stoll(meta.at("stage"));
    step = std::stoll(meta.at("step"));
    say("resuming at stage " + std::to_string(stage_index) + ", step " + std::to_string(step));
  }
  if (init_is_model) {
    // A model folder (or its model.safetensors): the exported weights under the reference names;
    // the training aids (probes) keep their fresh weights.
    load_demo_weights(model, *init_file);
    say("initial weights from the model '" + init_weights + "' (probes fresh)");
  } else if (init_file) {
    const SafetensorsFile& init = *init_file;
    at::NoGradGuard no_grad;
    for (auto& p : all_params(model)) {
      auto it = init.tensors().find("param." + p.name);
      if (it == init.tensors().end()) {  // e.g. a probe added since: it keeps its fresh weights
        say("--init-from: '" + o.init_from + "' lacks '" + p.name + "'; it starts from its initial weights");
        continue;
      }
      const at::Tensor saved = tensor_to_float(it->second);
      const bool same_shape = saved.sizes() == p.tensor.sizes();
      if (!same_shape && p.name.find("probe") != std::string::npos) {  // a training aid with new fields
        say("--init-from: '" + o.init_from + "' has '" + p.name + "' in another shape; it starts from its initial weights");
        continue;
      }
      TRIMKV_CHECK(same_shape, Format, "--init-from '", o.init_from, "': '", p.name, "' has another shape");
      p.tensor.copy_(saved);
    }
    say("initial weights from '" + o.init_from + "'");
  }
  if (o.export_only) {
    TRIMKV_CHECK(resuming, Input, "--export-checkpoint: no checkpoint in '", train_dir.string(), "'");
    write_demo_weights(model, (dir / "model.safetensors").string());
    say("exported the checkpoint's weights (stage " + std::to_string(stage_index) + ", step " +
        std::to_string(step) + ") to '" + (dir / "model.safetensors").string() + "'");
    result.seconds = seconds_since(t0);
    return result;
  }

  DemoProgress last_val;
  int64_t last_stage = -1;  // the last stage with steps: the one whose end options.average_last averages
  for (size_t k = 0; k < stages.size(); ++k)
    if (stages[k].cfg.steps > 0) last_stage = static_cast<int64_t>(k);
  for (; stage_index < static_cast<int64_t>(stages.size()); ++stage_index, step = 0) {
    const Stage& st = stages[static_cast<size_t>(stage_index)];
    if (st.cfg.steps == 0) continue;
    AdamWOptions ao;
    ao.weight_decay = o.weight_decay;
    ao.clip = o.clip;
    const std::vector<NamedParameter> params = stage_params(model, st.vision_only, o.freeze_tower, o.tower_lr_scale);
    AdamW adam(params, ao);
    if (ckpt_file && step > 0) adam.load_state("adam.", *ckpt_file, ckpt_path);
    // The running average of the weights the stage trains (`params`: the others do not move) over
    // its steps from average_from on (one sample after each step), written into the model after
    // the stage's last step.
    const int64_t average_from = stage_index == last_stage && o.average_last > 0
                                     ? std::max<int64_t>(0, st.cfg.steps - o.average_last)
                                     : st.cfg.steps;
    std::vector<at::Tensor> average;
    if (ckpt_file && step > average_from) {
      at::NoGradGuard no_grad;
      for (const auto& p : params) {
        auto it = ckpt_file->tensors().find("average." + p.name);
        TRIMKV_CHECK(it != ckpt_file->tensors().end(), Format, "checkpoint '", ckpt_path, "' lacks 'average.", p.name,
                     "' (the running weight average)");
        average.push_back(tensor_to_float(it->second).clone());
      }
    }
    ckpt_file = nullptr;
    auto save = [&](int64_t next_stage, int64_t next_step, bool with_adam) {
      std::vector<TensorToWrite> out;
      for (const auto& p : all_params(model)) out.push_back(float_tensor_to_write("param." + p.name, p.tensor));
      std::map<std::string, std::string> meta = {{"format", kCheckpointFormat},
                                                 {"options", opt_json.dump()},
                                                 {"stage", std::to_string(next_stage)},
                                                 {"step", std::to_string(next_step)}};
      if (with_adam) adam.save_state("adam.", out, meta);
      for (size_t k = 0; with_adam && k < average.size(); ++k)
        out.push_back(float_tensor_to_write("average." + params[k].name, average[k]));
      write_safetensors(ckpt_path, out, meta);
      result.checkpoint_path = ckpt_path;
    };
    say(std::string("stage ") + st.name + ": " + std::to_string(st.cfg.steps) + " steps of " +
        std::to_string(st.cfg.batch) + (st.vision_only ? " images" : " conversations"));
    world::WorldOptions sw = wopt;
    sw.max_images = st.cfg.max_images;
    sw.max_objects = st.cfg.max_objects;
    sw.min_objects = st.cfg.min_objects;
    const auto stage_t0 = std::chrono::steady_clock::now();
    const int64_t first_step = step;
    for (; step < st.cfg.steps; ++step) {
      if (cancel && cancel->load()) {
        save(stage_index, step, true);
        result.interrupted = true;
        result.seconds = seconds_since(t0);
        say("interrupted: checkpoint written to '" + ckpt_path + "' (continue with --resume)");
        return result;
      }
      // The step's data: conversation indices stage * stride + step * batch + b.
      if (st.cfg.objects_ramp > 0) {
        sw.max_objects = static_cast<int>(std::min<int64_t>(
            st.cfg.max_objects, 1 + step * st.cfg.max_objects / st.cfg.objects_ramp));
        sw.min_objects = std::min(st.cfg.min_objects, sw.max_objects);
      }
      DemoBatch batch = step_batch(st.cfg.batch, [&](int64_t b, DemoData::Images& images) {
        const int64_t index = stage_index * kStageIndexStride + step * st.cfg.batch + b;
        if (st.vision_only) {
          world::WorldOptions one = sw;
          one.max_images = 1;
          one.max_turns = 1;
          data.add_images(world::make_conversation(o.seed, world::Split::Train, index, one).scenes, images);
          return DemoSequence{};
        }
        return data.layout(world::make_training_conversation(o.seed, index, sw, extras), images);
      });
      const double lr = warmup_cosine_lr(step + 1, std::min(o.warmup, st.cfg.steps / 4), st.cfg.steps, st.cfg.lr,
                                         st.cfg.lr * o.min_lr_fraction);
      adam.zero_grad();
      const bool answers = !st.vision_only, train_tower = st.vision_only || !o.freeze_tower;
      auto objective = [&](const BatchLoss& l) {
        at::Tensor loss = st.vision_only ? l.aux
                                         : l.answer + o.aux_weight * (l.aux + l.found) + o.attn_weight * l.attn;
        if (l.image.defined()) loss = loss + o.image_probe_weight * l.image;  // chat stages with the probe
        if (l.cell.defined()) loss = loss + o.cell_readout_weight * l.cell;      // and with the readout
        return loss;
      };
      BatchLoss l;
      at::Tensor loss;
      if (o.shards > 1) {  // each part's share of the batch's losses, its gradients summed
        const std::vector<DemoBatch> parts = data.split(batch, o.shards);
        const LossCounts whole = loss_counts(model, batch, answers);
        std::vector<BatchLoss> shares(parts.size());
        shard_gradients(params, static_cast<int>(parts.size()), threads > 1, [&](int k) {
          shares[static_cast<size_t>(k)] = batch_loss(model, parts[static_cast<size_t>(k)], answers, train_tower, &whole,
                                                          o.shape_weight);
          return objective(shares[static_cast<size_t>(k)]);
        });
        l = add_parts(shares);
        loss = objective(l);
        const OneComputeThread one;  // the gradient norm's sum the same whatever the threads
        adam.step(lr);
      } else {
        l = batch_loss(model, batch, answers, train_tower, nullptr, o.shape_weight);
        loss = objective(l);
        loss.backward();
        adam.step(lr);
      }
      if (step >= average_from) {
        at::NoGradGuard no_grad;
        const int64_t n = step - average_from + 1;  // samples with this one
        for (size_t k = 0; k < params.size(); ++k) {
          const at::Tensor w = params[k].tensor.detach();
          if (n == 1) {
            average.push_back(w.clone());
          } else {
            average[k].add_((w - average[k]) / static_cast<double>(n));
          }
        }
        if (step + 1 == st.cfg.steps) {
          for (size_t k = 0; k < params.size(); ++k) params[k].tensor.copy_(average[k]);
          average.clear();
          say("stage " + std::string(st.name) + ": the weights are the average of its last " + std::to_string(n) +
              " steps'");
        }
      }

      DemoProgress pr;
      pr.stage = st.name;
      pr.step = step + 1;
      pr.total = st.cfg.steps;
      pr.loss = loss.item<double>();
      pr.aux_loss = l.aux.item<double>();
      pr.found_loss = l.found.defined() ? l.found.item<double>() : 0.0;
      pr.cell_loss = l.cell.defined() ? l.cell.item<double>() : -1.0;
      pr.answer_loss = l.answer.defined() ? l.answer.item<double>() : 0.0;
      pr.attn_loss = l.attn.defined() ? l.attn.item<double>() : 0.0;
      pr.attn_hops = l.attn_hops;
      pr.lookups = l.lookups;
      pr.lr = lr;
      pr.elapsed_s = seconds_since(t0);
      pr.eta_s = seconds_since(stage_t0) / static_cast<double>(step + 1 - first_step) *
                 static_cast<double>(st.cfg.steps - step - 1);
      if (step + 1 == st.cfg.steps || (o.val_every > 0 && (step + 1) % o.val_every == 0)) {
        validate(pr, !st.vision_only);
        if (!st.vision_only) last_val = pr;
      }
      if (o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0 && step + 1 < st.cfg.steps) {
        save(stage_index, step + 1, true);
        pr.checkpointed = true;
      }
      if (on_progress) on_progress(pr);
    }
    save(stage_index + 1, 0, false);
  }

  // Export.
  write_demo_weights(model, (dir / "model.safetensors").string());
  result.val_accuracy = last_val.val_accuracy;
  result.val_single = last_val.val_single;
  result.val_multi = last_val.val_multi;
  {
    const json summary = {{"options", opt_json},
                          {"val_accuracy", result.val_accuracy},
                          {"val_single_image", result.val_single},
                          {"val_multi_image", result.val_multi},
                          {"val_conversations", o.val_conversations},
                          {"seconds_this_run", seconds_since(t0)}};
    std::ofstream out((train_dir / "summary.json").string());
    out << summary.dump(2) << "\n";
  }
  say("export: Idefics3 checkpoint written to '" + dir.string() + "'");

  // Gates.
  if (!o.skip_gates) {
    const fs::path gate_dir = train_dir / "gate_data";
    world::WorldOptions gw = wopt;
    gw.max_images = world::kMaxImagesLimit;
    const world::WorldFiles files = world::write_world(gate_dir.string(), world::Split::Train, o.seed + 7919,
                                                       o.gate_conversations, gw);
    TrainOptions to;
    to.model_dir = dir.string();
    to.data_path = files.jsonl;
    to.out_path = (dir / "retention_gates.safetensors").string();
    to.checkpoint_path = (train_dir / "gates.ckpt").string();
    to.kind = GateKind::DBTrimKV;
    to.gate_hidden = 128;
    to.budget = o.gate_budget;
    to.lambda = o.gate_lambda;
    to.steps = o.gate_steps;
    to.batch = o.gate_batch;
    to.lr = 1e-3;
    to.min_lr = 1e-5;
    to.seed = o.seed;
    to.checkpoint_every = o.checkpoint_every;
    to.resume = o.resume && fs::exists(to.checkpoint_path);
    to.threads = threads;
    say("gates: DBTrimKV on " + std::to_string(o.gate_conversations) + " multi-image conversations, budget " +
        std::to_string(static_cast<int64_t>(o.gate_budget)) + " per head");
    const std::shared_ptr<const VlmModel> vlm = load_vlm(dir.string());
    const VlmSampleEncoder media(vlm);
    const TrainResult tr = train_gates_on(
        vlm->text, &media, to, [&](const std::string& w) { say("gates: " + w); }, {},
        [&](const TrainProgress& tp) {
          DemoProgress pr;
          pr.stage = "gates";
          pr.step = tp.step;
          pr.total = tp.total_steps;
          pr.loss = tp.loss;
          pr.answer_loss = tp.nll;
          pr.aux_loss = tp.cap;
          pr.lr = tp.lr;
          pr.elapsed_s = seconds_since(t0);
          pr.eta_s = tp.eta_s;
          pr.checkpointed = tp.checkpointed;
          if (on_progress) on_progress(pr);
        },
        cancel);
    if (tr.interrupted) {
      result.interrupted = true;
      result.checkpoint_path = tr.checkpoint_path;
      result.seconds = seconds_since(t0);
      return result;
    }
  }
  result.seconds = seconds_since(t0);
  return result;
}

}  // namespace trimkv::vision
