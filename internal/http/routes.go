package http

import "github.com/labstack/echo/v4"

// routes lists every endpoint of the API (docs/api.md, openapi.json).
func (s *server) routes(e *echo.Echo) {
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.json", s.openapi)
	e.GET("/metrics", s.metrics)
	e.GET("/", rootRedirect)
	e.GET("/ui", uiRedirect)
	e.GET("/ui/*", uiHandler())

	v1 := e.Group("/v1")
	v1.GET("/limits", s.listLimits)
	v1.PUT("/limits/:name", s.putLimit)
	v1.GET("/limits/:name", s.getLimit)
	v1.DELETE("/limits/:name", s.deleteLimit)

	v1.GET("/limits/:name/overrides", s.listOverrides)
	v1.PUT("/limits/:name/overrides/:pattern", s.putOverride)
	v1.GET("/limits/:name/overrides/:pattern", s.getOverride)
	v1.DELETE("/limits/:name/overrides/:pattern", s.deleteOverride)

	v1.GET("/limits/:name/counts", s.limitCounts)
	v1.GET("/limits/:name/buckets", s.listBuckets)
	v1.GET("/limits/:name/buckets/:key", s.getBucket)
	v1.GET("/limits/:name/buckets/", s.getBucket) // an empty key: 400 invalid_key, not 404
	v1.GET("/limits/:name/buckets/:key/can-accept", s.canAccept)
	v1.POST("/limits/:name/buckets/:key/fillup", s.fillup)
	v1.POST("/limits/:name/buckets/:key/drain", s.drain)
	v1.POST("/limits/:name/buckets/:key/reservations", s.reserve)
	v1.GET("/limits/:name/buckets/:key/reservations", s.listHolds)
	v1.GET("/limits/:name/buckets/:key/history", s.history)
	v1.GET("/limits/:name/buckets/:key/levels", s.levels)
	v1.GET("/limits/:name/buckets/:key/events", s.bucketEvents)
	v1.POST("/limits/:name/buckets/:key/grants", s.addGrant)
	v1.GET("/limits/:name/buckets/:key/grants", s.listGrants)
	v1.DELETE("/limits/:name/buckets/:key/grants/:id", s.revokeGrant)
	v1.POST("/fillup", s.multiFillup)
	v1.GET("/events", s.events)

	v1.GET("/reservations/:id", s.getReservation)
	v1.POST("/reservations/:id/commit", s.commit)
	v1.POST("/reservations/:id/release", s.release)
}
