// Placeholder so the facade library has a translation unit until the driver lands.
namespace stitch {}
