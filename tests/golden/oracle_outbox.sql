-- create_outbox_table: Sales_Api_OutboxData
CREATE TABLE "SALES_API_OD" (
    MESSAGEID NVARCHAR2(200) NOT NULL,
    DISPATCHED NUMBER(1,0) DEFAULT 0 NOT NULL CHECK (DISPATCHED IN (0, 1)),
    DISPATCHEDAT TIMESTAMP,
    OPERATIONS CLOB NOT NULL,
    PERSISTENCEVERSION VARCHAR2(23) NOT NULL,
    CONSTRAINT "SALES_API_OD_PK" PRIMARY KEY (MESSAGEID) ENABLE
)
/
CREATE INDEX "SALES_API_OD_IX" ON "SALES_API_OD" (DISPATCHED, DISPATCHEDAT)
/
-- drop_outbox_table (refused while a message is not dispatched): Sales_Api_OutboxData
DECLARE
    pending NUMBER;
BEGIN
    SELECT COUNT(*) INTO pending FROM "SALES_API_OD" WHERE Dispatched = 0 AND ROWNUM = 1;
    IF pending > 0 THEN
        RAISE_APPLICATION_ERROR(-20001, 'refusing to drop outbox table "SALES_API_OD": it still holds messages not yet dispatched (Dispatched = false). Let the endpoint dispatch them first, or list the table under discard: in topology.yaml to drop it with its rows');
    END IF;
END;
/
DROP TABLE "SALES_API_OD"
/
-- drop_outbox_table (discarding): Sales_Api_OutboxData
DROP TABLE "SALES_API_OD"
/
