// Result/Error live in the public header so the API and the internals share one type.
#pragma once

#include "geniex/result.hpp"
