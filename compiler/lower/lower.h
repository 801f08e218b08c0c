// Lowering: a flat list of passes, read top to bottom. Each step logs one line.
#pragma once
#include <string>
#include <vector>

#include "compiler/ir/ir.h"

namespace winnow::lower {

// verify -> canonicalise. Throws ir::UserError for the user's mistakes.
// `log` (may be null) receives one line per pass.
ir::Expr lower_score(const ir::Expr& score, int heads, std::vector<std::string>* log);

}  // namespace winnow::lower
