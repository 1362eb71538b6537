// A minimal host for Kong Manager OSS's plugin form: the PluginForm component of
// @kong-ui-public/entities-plugins, configured as Kong Manager configures it (app kongManager,
// the default workspace, the Admin API at /api: the Go test's stand-in of Kong's Admin API).
// What the form saves, or the error the Admin API answers, is kept in window.__saved or
// window.__error for the test.
import { createApp, h } from 'vue'
import { createRouter, createMemoryHistory, RouterView } from 'vue-router'
import Kongponents from '@kong/kongponents'
import '@kong/kongponents/dist/style.css'
import { PluginForm } from '@kong-ui-public/entities-plugins'
import '@kong-ui-public/entities-plugins/dist/style.css'

const config = {
  app: 'kongManager',
  workspace: '',
  apiBaseUrl: '/api',
  gatewayInfo: { edition: 'community', version: '3.9.1' },
  cancelRoute: { path: '/' },
  disableConsumerGroupScope: true,
  isNewOtelSchema: true,
}

const Form = {
  render: () => h('main', { style: 'max-width: 960px; margin: 16px auto' }, [
    h('h1', { style: 'font: 600 20px sans-serif' }, 'New Plugin: diana'),
    h(PluginForm, {
      config,
      pluginType: 'diana',
      onUpdate: (plugin) => { window.__saved = plugin },
      onError: (err) => { window.__error = String(err && err.message) },
    }),
  ]),
}

const router = createRouter({ history: createMemoryHistory(), routes: [{ path: '/', component: Form }] })
router.push('/')
createApp({ render: () => h(RouterView) }).use(router).use(Kongponents).mount('#app')
