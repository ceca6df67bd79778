// Polyfills the SDK needs on older Node versions. Import this before @codebuff/sdk runs.
//
// @codebuff/sdk 0.10.7 calls Promise.withResolvers (processStream), which Node 22 has and
// Node 20 lacks.

if (typeof Promise.withResolvers !== 'function') {
  Object.defineProperty(Promise, 'withResolvers', {
    configurable: true,
    writable: true,
    value: function withResolvers() {
      let resolve
      let reject
      const promise = new this((res, rej) => {
        resolve = res
        reject = rej
      })
      return { promise, resolve, reject }
    },
  })
}
