#include "generation_settings.h"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QSignalBlocker>
#include <QSpinBox>

GenerationSettings::GenerationSettings(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout(this);
  m_maxTokens = new QSpinBox(this);
  m_maxTokens->setRange(1, 100'000);
  m_maxTokens->setToolTip(tr("The answer stops after this many tokens (or earlier, at the end-of-turn token)."));
  m_temperature = new QDoubleSpinBox(this);
  m_temperature->setRange(0.0, 5.0);
  m_temperature->setSingleStep(0.1);
  m_temperature->setToolTip(tr("0: greedy (always the most likely token, reproducible); higher: more varied."));
  m_topP = new QDoubleSpinBox(this);
  m_topP->setRange(0.01, 1.0);
  m_topP->setSingleStep(0.05);
  m_topP->setToolTip(tr("Sample only from the most likely tokens whose probabilities add up to p (1: off)."));
  m_topK = new QSpinBox(this);
  m_topK->setRange(0, 100'000);
  m_topK->setToolTip(tr("Sample only from the k most likely tokens (0: off)."));
  m_repetition = new QDoubleSpinBox(this);
  m_repetition->setRange(1.0, 3.0);
  m_repetition->setSingleStep(0.05);
  m_repetition->setToolTip(tr("Above 1 discourages tokens already in the conversation (1: off)."));
  m_seed = new QSpinBox(this);
  m_seed->setRange(0, 2'000'000'000);
  m_seed->setToolTip(tr("Random seed of sampling (the same seed and settings give the same answer)."));
  form->addRow(tr("Max new tokens"), m_maxTokens);
  form->addRow(tr("Temperature"), m_temperature);
  form->addRow(tr("Top-p"), m_topP);
  form->addRow(tr("Top-k"), m_topK);
  form->addRow(tr("Repetition penalty"), m_repetition);
  form->addRow(tr("Seed"), m_seed);
  setParams(trimkv::GenerationParams{});

  auto changed = [this] { Q_EMIT paramsChanged(params()); };
  connect(m_maxTokens, qOverload<int>(&QSpinBox::valueChanged), this, changed);
  connect(m_temperature, qOverload<double>(&QDoubleSpinBox::valueChanged), this, changed);
  connect(m_topP, qOverload<double>(&QDoubleSpinBox::valueChanged), this, changed);
  connect(m_topK, qOverload<int>(&QSpinBox::valueChanged), this, changed);
  connect(m_repetition, qOverload<double>(&QDoubleSpinBox::valueChanged), this, changed);
  connect(m_seed, qOverload<int>(&QSpinBox::valueChanged), this, changed);
}

trimkv::GenerationParams GenerationSettings::params() const {
  trimkv::GenerationParams p = m_base;
  p.max_new_tokens = m_maxTokens->value();
  p.sampling.temperature = static_cast<float>(m_temperature->value());
  p.sampling.top_p = static_cast<float>(m_topP->value());
  p.sampling.top_k = m_topK->value();
  p.sampling.repetition_penalty = static_cast<float>(m_repetition->value());
  p.sampling.seed = static_cast<uint64_t>(m_seed->value());
  return p;
}

void GenerationSettings::setParams(const trimkv::GenerationParams& p) {
  m_base = p;
  const QSignalBlocker b1(m_maxTokens), b2(m_temperature), b3(m_topP), b4(m_topK), b5(m_repetition), b6(m_seed);
  m_maxTokens->setValue(p.max_new_tokens);
  m_temperature->setValue(p.sampling.temperature);
  m_topP->setValue(p.sampling.top_p);
  m_topK->setValue(p.sampling.top_k);
  m_repetition->setValue(p.sampling.repetition_penalty);
  m_seed->setValue(static_cast<int>(std::min<uint64_t>(p.sampling.seed, 2'000'000'000)));
}
