// Streaming chat: a Session keeps the conversation (and its KV cache) across turns; each
// reply is printed piece by piece as it is generated.
//   build/examples/streaming_chat [model.gguf]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "geniex/geniex.hpp"

int main(int argc, char** argv) {
  std::string path;
  if (argc > 1) {
    path = argv[1];
  } else if (const char* env = std::getenv("GENIEX_MODEL")) {
    path = env;
  } else {
    const char* cache = std::getenv("GENIEX_CACHE");
    const char* home = std::getenv("HOME");
    path = (cache ? std::string(cache) : std::string(home ? home : ".") + "/.cache/geniex") +
           "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  }

  geniex::Result<geniex::Model> model = geniex::ModelBuilder(path).with_device(geniex::Device::auto_select()).build();
  if (!model) {
    std::fprintf(stderr, "error: %s\n", model.error().to_string().c_str());
    return 1;
  }
  geniex::Result<geniex::Session> session = model->new_session();
  if (!session) {
    std::fprintf(stderr, "error: %s\n", session.error().to_string().c_str());
    return 1;
  }

  geniex::GenerationConfig config;
  config.max_new_tokens = 64;
  config.temperature = 0.0f;     // greedy: the same answer every run
  config.repeat_penalty = 1.2f;  // keeps a small model from looping
  geniex::GenerationStats stats;
  config.stats = &stats;
  config.on_text = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;  // false would stop the generation
  };

  std::vector<geniex::ChatMessage> messages = {
      {"system", "You are a concise assistant."},
  };
  for (const char* question : {"What is an NPU?", "Name one advantage of running it on a phone."}) {
    std::printf("> %s\n", question);
    messages.push_back({"user", question});
    geniex::Result<std::string> reply = session->chat(messages, config);
    if (!reply) {
      std::fprintf(stderr, "\nerror: %s\n", reply.error().to_string().c_str());
      return 1;
    }
    messages.push_back({"assistant", *reply});
    std::printf("\n[%d prompt tokens, %d reused; %.1f tok/s]\n\n", stats.prompt_tokens,
                stats.reused_prompt_tokens, stats.decode_tokens_per_second());
  }
  return 0;
}
