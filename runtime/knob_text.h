// The text of a tuned point ("name=value name=value ...", integer values) as the tuning
// database stores it: one parser for every op's point (ops/topk/topk_space.h, ops/block/block_space.h).
#pragma once
#include <map>
#include <optional>
#include <string>

namespace winnow::rt {

// The words of `text` as name -> value; nullopt when a word is not name=integer (the whole
// integer) or a name repeats.
std::optional<std::map<std::string, int>> parse_knob_text(const std::string& text);

}  // namespace winnow::rt
