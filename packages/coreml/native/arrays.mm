// Element types, shapes and MLMultiArray access for the Core ML addon: strided copies, scoped
// reads and writes (pixel buffers locked meanwhile), and the zeroed arrays the addon makes, fp16
// ones IOSurface-backed so that the ANE can write into them (MLMultiArray initWithPixelBuffer:shape:
// over CVPixelBufferCreate with kCVPixelBufferIOSurfacePropertiesKey).

#include "addon.h"

#include <cstdio>
#include <cstring>

namespace coreml_addon {

namespace {

NSArray<NSNumber*>* ToNSShape(const std::vector<int64_t>& shape) {
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:shape.size()];
  for (int64_t d : shape) [a addObject:@(d)];
  return a;
}

}  // namespace

NSString* ToNS(const std::string& s) { return [NSString stringWithUTF8String:s.c_str()]; }

std::string FromNS(NSString* s) { return s ? std::string([s UTF8String]) : std::string(); }

std::string ErrorText(NSError* error, const std::string& what) {
  std::string msg = what;
  if (error) msg += ": " + FromNS(error.localizedDescription);
  return msg;
}

bool DTypeOf(MLMultiArrayDataType t, DType* out) {
  switch (t) {
    case MLMultiArrayDataTypeFloat16: *out = DType::F16; return true;
    case MLMultiArrayDataTypeFloat32: *out = DType::F32; return true;
    case MLMultiArrayDataTypeInt32: *out = DType::I32; return true;
    case MLMultiArrayDataTypeFloat64: *out = DType::F64; return true;
    default: return false;
  }
}

MLMultiArrayDataType ToML(DType t) {
  switch (t) {
    case DType::F16: return MLMultiArrayDataTypeFloat16;
    case DType::F32: return MLMultiArrayDataTypeFloat32;
    case DType::I32: return MLMultiArrayDataTypeInt32;
    case DType::F64: return MLMultiArrayDataTypeFloat64;
  }
  return MLMultiArrayDataTypeFloat32;
}

size_t ElemSize(DType t) {
  switch (t) {
    case DType::F16: return 2;
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::F64: return 8;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::F16: return "fp16";
    case DType::F32: return "fp32";
    case DType::I32: return "int32";
    case DType::F64: return "fp64";
  }
  return "?";
}
// "fp16" | "fp32" | "int32": what JS may hand in.
bool ParseDType(const std::string& s, DType* out) {
  if (s == "fp16") *out = DType::F16;
  else if (s == "fp32") *out = DType::F32;
  else if (s == "int32") *out = DType::I32;
  else return false;
  return true;
}

std::string DTypeText(MLMultiArrayDataType t) {
  DType d;
  if (DTypeOf(t, &d)) return DTypeName(d);
  char buf[32];
  snprintf(buf, sizeof buf, "0x%lx", static_cast<long>(t));
  return buf;
}

std::vector<int64_t> ToVec(NSArray<NSNumber*>* a) {
  std::vector<int64_t> v;
  for (NSNumber* n in a) v.push_back(n.longLongValue);
  return v;
}
std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Elements of a shape whose every dimension is > 0 (0 when one is not, or when it overflows).
int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || n > (INT64_C(1) << 40) / d) return 0;
    n *= d;
  }
  return n;
}

std::vector<int64_t> DenseStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// Copies a tensor of `shape` between two strided layouts (strides in elements), a run of the
// innermost dimension at a time where both have it contiguous.
void CopyStrided(uint8_t* dst, const std::vector<int64_t>& dstStrides, const uint8_t* src,
                 const std::vector<int64_t>& srcStrides, const std::vector<int64_t>& shape, size_t elem) {
  const size_t rank = shape.size();
  if (rank == 0) {
    memcpy(dst, src, elem);
    return;
  }
  const int64_t inner = shape[rank - 1];
  const bool contiguous = dstStrides[rank - 1] == 1 && srcStrides[rank - 1] == 1;
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; d++) outer *= shape[d];
  std::vector<int64_t> idx(rank, 0);
  for (int64_t o = 0; o < outer; o++) {
    int64_t doff = 0, soff = 0;
    for (size_t d = 0; d + 1 < rank; d++) {
      doff += idx[d] * dstStrides[d];
      soff += idx[d] * srcStrides[d];
    }
    if (contiguous) {
      memcpy(dst + doff * elem, src + soff * elem, (size_t)inner * elem);
    } else {
      for (int64_t i = 0; i < inner; i++) {
        memcpy(dst + (doff + i * dstStrides[rank - 1]) * elem, src + (soff + i * srcStrides[rank - 1]) * elem, elem);
      }
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Scoped access to an array's memory. Strides: the handler's own for writes; for reads the
// array's (getBytesWithHandler gives none). Pixel-buffer-backed arrays are locked meanwhile.
void ReadArray(MLMultiArray* a, const std::function<void(const uint8_t*, const std::vector<int64_t>&)>& fn) {
  CVPixelBufferRef pb = a.pixelBuffer;
  if (pb) CVPixelBufferLockBaseAddress(pb, kCVPixelBufferLock_ReadOnly);
  const std::vector<int64_t> strides = ToVec(a.strides);
  const auto* f = &fn;
  const auto* s = &strides;
  [a getBytesWithHandler:^(const void* bytes, NSInteger) {
    (*f)(static_cast<const uint8_t*>(bytes), *s);
  }];
  if (pb) CVPixelBufferUnlockBaseAddress(pb, kCVPixelBufferLock_ReadOnly);
}

void WriteArray(MLMultiArray* a, const std::function<void(uint8_t*, NSInteger, const std::vector<int64_t>&)>& fn) {
  CVPixelBufferRef pb = a.pixelBuffer;
  if (pb) CVPixelBufferLockBaseAddress(pb, 0);
  const auto* f = &fn;
  [a getMutableBytesWithHandler:^(void* bytes, NSInteger size, NSArray<NSNumber*>* strides) {
    (*f)(static_cast<uint8_t*>(bytes), size, ToVec(strides));
  }];
  if (pb) CVPixelBufferUnlockBaseAddress(pb, 0);
}

void ZeroArray(MLMultiArray* a) {
  WriteArray(a, [](uint8_t* p, NSInteger size, const std::vector<int64_t>&) { memset(p, 0, (size_t)size); });
}

// A zeroed array. fp16: IOSurface-backed (shape's last dimension = width, the rest = height), so
// that the ANE can write into it; plain when that cannot be made, or for other types.
MLMultiArray* NewArray(const std::vector<int64_t>& shape, DType dtype, bool surface, std::string* err) {
  if (shape.empty() || Count(shape) == 0) {
    *err = "shape " + ShapeText(shape) + " must have at least one dimension, each > 0";
    return nil;
  }
  NSArray<NSNumber*>* s = ToNSShape(shape);
  MLMultiArray* a = nil;
  if (surface && dtype == DType::F16) {
    const size_t width = (size_t)shape.back();
    const size_t height = (size_t)(Count(shape) / shape.back());
    CVPixelBufferRef pb = nullptr;
    NSDictionary* attrs = @{(id)kCVPixelBufferIOSurfacePropertiesKey : @{}};
    if (CVPixelBufferCreate(kCFAllocatorDefault, width, height, kCVPixelFormatType_OneComponent16Half,
                            (__bridge CFDictionaryRef)attrs, &pb) == kCVReturnSuccess && pb) {
      @try {
        a = [[MLMultiArray alloc] initWithPixelBuffer:pb shape:s];
      } @catch (NSException*) {
        a = nil;  // a layout Core ML refuses for pixel buffers: a plain array serves
      }
      CVPixelBufferRelease(pb);
    }
  }
  if (!a) {
    NSError* error = nil;
    a = [[MLMultiArray alloc] initWithShape:s dataType:ToML(dtype) error:&error];
    if (!a) {
      *err = ErrorText(error, "could not allocate a " + std::string(DTypeName(dtype)) + " array of shape " + ShapeText(shape));
      return nil;
    }
  }
  ZeroArray(a);
  return a;
}

// Copies `src` into `dst` (same shape and type) through both arrays' strides.
bool CopyArray(MLMultiArray* src, MLMultiArray* dst, std::string* err) {
  DType dt;
  if (src.dataType != dst.dataType || !DTypeOf(src.dataType, &dt) || ![src.shape isEqualToArray:dst.shape]) {
    *err = "an output of type " + DTypeText(src.dataType) + " " + ShapeText(ToVec(src.shape)) +
           " does not fit its buffer of type " + DTypeText(dst.dataType) + " " + ShapeText(ToVec(dst.shape));
    return false;
  }
  const std::vector<int64_t> shape = ToVec(src.shape);
  ReadArray(src, [&](const uint8_t* from, const std::vector<int64_t>& fromStrides) {
    WriteArray(dst, [&](uint8_t* to, NSInteger, const std::vector<int64_t>& toStrides) {
      CopyStrided(to, toStrides, from, fromStrides, shape, ElemSize(dt));
    });
  });
  return true;
}

}  // namespace coreml_addon
