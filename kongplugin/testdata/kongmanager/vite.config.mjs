import { defineConfig } from 'vite'


// Built by the Go test (kongmanager_test.go) into a temporary directory; relative asset paths so
// the stand-in Admin API serves the page from any directory.
export default defineConfig({
  base: './',
  
  logLevel: 'warn',
  build: { chunkSizeWarningLimit: 100000, reportCompressedSize: false },
})
