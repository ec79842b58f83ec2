#include "tour_panel.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

TourHighlight::TourHighlight(QWidget* parent) : QWidget(parent) {
  setAttribute(Qt::WA_TransparentForMouseEvents);
  setAttribute(Qt::WA_NoSystemBackground);
  setObjectName(QStringLiteral("tourHighlight"));
  hide();
}

void TourHighlight::follow(QWidget* target) {
  m_target = target;
  if (!target || !target->isVisible() || !parentWidget()) {
    hide();
    return;
  }
  const QPoint topLeft = target->mapTo(parentWidget(), QPoint(0, 0));
  const QRect r = QRect(topLeft, target->size()).adjusted(-4, -4, 4, 4);
  if (geometry() != r) setGeometry(r);
  show();
  raise();
}

void TourHighlight::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  QPen pen(QColor(0xf9, 0x73, 0x16), 3);
  p.setPen(pen);
  p.setBrush(Qt::NoBrush);
  p.drawRoundedRect(QRectF(rect()).adjusted(1.5, 1.5, -1.5, -1.5), 6, 6);
}

TourPanel::TourPanel(QWidget* window) : QFrame(window) {
  setObjectName(QStringLiteral("tourPanel"));
  setFrameShape(QFrame::StyledPanel);
  setAutoFillBackground(true);
  setFixedWidth(380);
  auto* layout = new QVBoxLayout(this);
  m_title = new QLabel(this);
  m_title->setWordWrap(true);
  m_text = new QLabel(this);
  m_text->setWordWrap(true);
  m_text->setTextFormat(Qt::RichText);
  layout->addWidget(m_title);
  layout->addWidget(m_text);
  auto* row = new QHBoxLayout;
  m_action = new QPushButton(this);
  m_back = new QPushButton(tr("Back"), this);
  m_next = new QPushButton(tr("Next"), this);
  m_close = new QPushButton(tr("Close"), this);
  row->addWidget(m_action);
  row->addStretch(1);
  row->addWidget(m_back);
  row->addWidget(m_next);
  row->addWidget(m_close);
  layout->addLayout(row);
  connect(m_back, &QPushButton::clicked, this, &TourPanel::back);
  connect(m_next, &QPushButton::clicked, this, &TourPanel::next);
  connect(m_close, &QPushButton::clicked, this, &TourPanel::stop);
  connect(m_action, &QPushButton::clicked, this, [this] {
    if (m_current >= 0 && m_steps[static_cast<size_t>(m_current)].action) m_steps[static_cast<size_t>(m_current)].action();
  });
  m_highlight = new TourHighlight(window);
  m_follow = new QTimer(this);
  m_follow->setInterval(200);
  connect(m_follow, &QTimer::timeout, this, &TourPanel::place);
  hide();
}

void TourPanel::setSteps(std::vector<TourStep> steps) {
  m_steps = std::move(steps);
  m_current = -1;
}

void TourPanel::start() {
  if (m_steps.empty()) return;
  show();
  m_follow->start();
  showStep(0);
}

void TourPanel::showStep(int index) {
  if (index < 0 || index >= stepCount()) return;
  m_current = index;
  const TourStep& s = m_steps[static_cast<size_t>(index)];
  if (s.enter) s.enter();
  m_title->setText(tr("<b>Step %1 of %2: %3</b>").arg(index + 1).arg(stepCount()).arg(s.title));
  m_text->setText(s.text);
  m_action->setVisible(!s.actionLabel.isEmpty() && s.action);
  m_action->setText(s.actionLabel);
  m_back->setEnabled(index > 0);
  m_next->setText(index + 1 < stepCount() ? tr("Next") : tr("Finish"));
  // The wrapped text decides the height at the panel's fixed width.
  resize(width(), std::max(sizeHint().height(), heightForWidth(width())));
  place();
  Q_EMIT stepShown(index);
}

void TourPanel::next() {
  if (m_current + 1 < stepCount()) showStep(m_current + 1);
  else stop();
}

void TourPanel::back() {
  if (m_current > 0) showStep(m_current - 1);
}

void TourPanel::stop() {
  m_follow->stop();
  m_highlight->follow(nullptr);
  hide();
  m_current = -1;
  Q_EMIT closed();
}

QWidget* TourPanel::currentTarget() const {
  if (m_current < 0) return nullptr;
  const TourStep& s = m_steps[static_cast<size_t>(m_current)];
  return s.target ? s.target() : nullptr;
}

void TourPanel::place() {
  QWidget* window = parentWidget();
  if (!window || !isVisible()) return;
  QWidget* target = currentTarget();
  m_highlight->follow(target);
  // Over the lower left of the anchor (the conversation, mostly empty space), else of the window;
  // moved to the right, then up, when it would cover its target.
  QPoint at(12, window->height() - height() - 36);
  if (m_anchor && m_anchor->isVisible()) {
    const QPoint a = m_anchor->mapTo(window, QPoint(0, m_anchor->height()));
    at = QPoint(a.x() + 12, a.y() - height() - 12);
  }
  if (target) {
    const QRect t(target->mapTo(window, QPoint(0, 0)), target->size());
    if (t.intersects(QRect(at, size()))) at.setX(std::max(12, window->width() - width() - 12));
    if (t.intersects(QRect(at, size()))) at.setY(std::max(12, t.top() - height() - 12));
  }
  move(at);
  raise();
}
