// Precompiled header: the heavy includes every translation unit shares.
#pragma once

#include <napi.h>

#include <mlx/mlx.h>
