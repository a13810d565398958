// mpt/mpt.h: the one header a training program includes.
#pragma once

#include "mpt/core/device.h"
#include "mpt/core/dtype.h"
#include "mpt/core/error.h"
#include "mpt/core/generator.h"
#include "mpt/core/memory.h"
#include "mpt/core/shape.h"
#include "mpt/core/stream.h"
#include "mpt/core/tensor.h"
