#include "draft_keeper.h"

#include <QDir>
#include <QFileInfo>
#include <exception>

#include "conversation_file.h"

DraftKeeper::DraftKeeper(std::function<Draft()> current, QObject* parent)
    : QObject(parent), m_current(std::move(current)) {
  m_timer.setSingleShot(true);
  m_timer.setInterval(kDelayMs);
  connect(&m_timer, &QTimer::timeout, this, &DraftKeeper::write);
}

void DraftKeeper::setFile(const QString& path) {
  m_timer.stop();
  m_path = path;
}

void DraftKeeper::changed() {
  if (!m_path.isEmpty()) m_timer.start();
}

void DraftKeeper::flush() {
  if (m_timer.isActive()) {
    m_timer.stop();
    write();
  }
}

// Runs only with a file set: the timer starts only then, and setFile stops it.
void DraftKeeper::write() {
  const Draft d = m_current();
  // An empty draft is a file of no messages: the copies of earlier drafts' images go with it.
  std::vector<trimkv::Message> messages;
  if (!d.text.isEmpty() || !d.images.isEmpty()) {
    trimkv::Message m{"user", {}};
    for (const QString& image : d.images) m.content.push_back(trimkv::ContentPart::image_part(image.toStdString()));
    m.content.push_back(trimkv::ContentPart::text_part(d.text.toStdString()));
    messages.push_back(std::move(m));
  }
  try {
    QDir().mkpath(QFileInfo(m_path).absolutePath());
    saveConversationFile(m_path, messages, QString());  // a draft belongs to no model
  } catch (const std::exception& e) {
    Q_EMIT failed(tr("The message being written could not be kept in %1: %2").arg(m_path, QString::fromUtf8(e.what())));
  }
}

DraftKeeper::Draft DraftKeeper::load() const {
  Draft d;
  if (m_path.isEmpty() || !QFileInfo::exists(m_path)) return d;
  try {
    const std::vector<trimkv::Message> messages = loadConversationFile(m_path);
    if (messages.size() != 1 || messages.front().role != "user") return d;
    for (const trimkv::ContentPart& p : messages.front().content) {
      if (p.kind == trimkv::ContentPart::Kind::Text) d.text += QString::fromStdString(p.text);
      else if (const QString image = QString::fromStdString(p.path); QFileInfo::exists(image)) d.images << image;
    }
  } catch (const std::exception&) {
    return {};  // not a draft (any more): nothing to put back
  }
  return d;
}
