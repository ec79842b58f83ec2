// Template: the public face of the interpreter (trimkv/core/jinja.h). Parsing normalises the
// source and builds the tree once; each render runs a fresh evaluator over the shared,
// immutable tree, so one Template can render on several threads at once.
#include <limits>

#include "template/jinja_ast.h"
#include "template/jinja_eval.h"
#include "template/jinja_lexer.h"
#include "trimkv/core/error.h"
#include "trimkv/core/jinja.h"

namespace trimkv::jinja {

struct Template::Impl {
  std::string name;
  std::string source;  // normalised (see normalize_source); text nodes point into it
  Options options;
  std::unique_ptr<Node> root;
};

Template::Template(std::shared_ptr<const Impl> impl) : m_impl(std::move(impl)) {}

Template Template::parse(const std::string& source, const std::string& name, const Options& options) {
  const size_t limit = std::min<size_t>(options.limits.max_source_bytes, std::numeric_limits<uint32_t>::max() - 16);
  TRIMKV_CHECK(source.size() <= limit, Input, name, ":1:1: the template is ", source.size(),
               " bytes, over the limit of ", limit, " bytes (Limits::max_source_bytes)");
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  impl->options = options;
  impl->source = normalize_source(source, options.keep_trailing_newline);
  impl->root = parse_template(impl->name, impl->source, impl->options);
  return Template(std::move(impl));
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  TRIMKV_CHECK(context.is_object() || context.is_null(), Input, m_impl->name,
               ":1:1: the render context must be a JSON object, not ", context.type_name());
  Interp interp(SourceRef{m_impl->name, m_impl->source}, *m_impl->root, m_impl->options);
  return interp.render(context);
}

const std::string& Template::name() const { return m_impl->name; }

}  // namespace trimkv::jinja
