// geniex::Tokenizer: the public handle over tok::Tokenizer and its chat template. Handles share
// the (immutable) tokenizer, so copies are cheap and a handle taken from a Model outlives it.
#include <utility>

#include "geniex/geniex.hpp"
#include "geniex/tokenizer.hpp"
#include "runtime/impl.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex {

struct Tokenizer::Impl {
  std::shared_ptr<const tok::Tokenizer> tok;
  std::optional<tok::ChatTemplate> chat_template;
  std::optional<Error> template_error;  // a template that does not parse: reported when used

  static std::shared_ptr<const Impl> make(std::shared_ptr<const tok::Tokenizer> t) {
    auto impl = std::make_shared<Impl>();
    impl->tok = std::move(t);
    if (const std::string& src = impl->tok->chat_template(); !src.empty()) {
      auto parsed = tok::ChatTemplate::parse(src);
      if (parsed) {
        impl->chat_template = std::move(parsed).value();
      } else {
        impl->template_error = make_error(parsed.error().code, "chat template: " + parsed.error().message);
      }
    }
    return impl;
  }
};

struct Tokenizer::Stream::Impl {
  std::shared_ptr<const Tokenizer::Impl> owner;  // keeps the tokenizer alive
  tok::StreamDecoder decoder;
  Impl(std::shared_ptr<const Tokenizer::Impl> o, bool skip_special)
      : owner(std::move(o)), decoder(*owner->tok, skip_special) {}
};

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  GX_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> t, tok::Tokenizer::from_path(path));
  return Tokenizer(Impl::make(std::shared_ptr<const tok::Tokenizer>(std::move(t))));
}

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  return impl_->tok->encode(text, options.add_special, options.parse_special);
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return impl_->tok->decode(ids, skip_special);
}

bool Tokenizer::has_chat_template() const { return impl_->chat_template.has_value(); }

Result<std::string> Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                                   bool add_generation_prompt) const {
  if (impl_->template_error) return *impl_->template_error;
  if (!impl_->chat_template) return make_error(ErrorCode::NotFound, "the tokenizer has no chat template");
  std::vector<tok::ChatMessage> msgs;
  msgs.reserve(messages.size());
  for (const ChatMessage& m : messages) msgs.push_back({m.role, m.content});
  const tok::Tokenizer& t = *impl_->tok;
  return impl_->chat_template->render(msgs, add_generation_prompt, t.token_bytes(t.bos_id()),
                                      t.token_bytes(t.eos_id()));
}

int32_t Tokenizer::n_vocab() const { return impl_->tok->n_vocab(); }

std::optional<int32_t> Tokenizer::bos_id() const {
  const int32_t id = impl_->tok->bos_id();
  return id >= 0 && id < n_vocab() ? std::optional<int32_t>(id) : std::nullopt;
}

std::optional<int32_t> Tokenizer::eos_id() const {
  const int32_t id = impl_->tok->eos_id();
  return id >= 0 && id < n_vocab() ? std::optional<int32_t>(id) : std::nullopt;
}

bool Tokenizer::is_end_of_generation(int32_t id) const { return impl_->tok->is_eog(id); }
bool Tokenizer::is_special(int32_t id) const { return impl_->tok->is_special(id); }
std::string Tokenizer::token_bytes(int32_t id) const { return impl_->tok->token_bytes(id); }
std::optional<int32_t> Tokenizer::find_token(std::string_view spelling) const {
  return impl_->tok->find_token(spelling);
}

Tokenizer::Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Stream::Stream(Stream&&) noexcept = default;
Tokenizer::Stream& Tokenizer::Stream::operator=(Stream&&) noexcept = default;
Tokenizer::Stream::~Stream() = default;
std::string Tokenizer::Stream::push(int32_t id) { return impl_->decoder.push(id); }
std::string Tokenizer::Stream::flush() { return impl_->decoder.flush(); }

Tokenizer::Stream Tokenizer::stream(bool skip_special) const {
  return Stream(std::make_unique<Stream::Impl>(impl_, skip_special));
}

Result<Tokenizer> Model::tokenizer() const {
  GX_ASSIGN_OR_RETURN(const tok::Tokenizer* t, impl_->require_tokenizer());
  (void)t;
  return Tokenizer(Tokenizer::Impl::make(impl_->tokenizer));
}

}  // namespace geniex
